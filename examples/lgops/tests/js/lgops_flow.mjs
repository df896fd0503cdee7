// Drives the web UI in headless Chromium with the LangGraph ops example on two gateway pods:
// alice signs in on pod A, picks the lgops agent, asks; the graph's text streams and its
// interrupt() shows as a confirm card. A second browser (its own cookie jar) signs in as alice on
// pod B, opens the same run and approves there; the card closes on pod A, whose page streams the
// rest to done. Prints RESULT <json> (the page's streamed text, the run id, what the cards
// showed) for the test to compare with the run's persisted events.
// Usage: node lgops_flow.mjs <gateway A url> <gateway B url>
import { chromium } from "playwright-core";

const [baseA, baseB] = process.argv.slice(2);
const T = 30_000;
const log = (...a) => console.log("[lgops-ui]", ...a);

function check(cond, message) {
  if (!cond) throw new Error(`check failed: ${message}`);
}

async function signIn(page, base, user) {
  await page.goto(base);
  await page.fill("#login-user", user);
  await page.click("#login-form button[type=submit]");
  await page.waitForSelector("#shell", { state: "visible", timeout: T });
  check((await page.textContent("#me-name")) === user, `signed in as ${user} on ${base}`);
}

const runText = (page) =>
  page.$$eval(".run .bubble.assistant .text", (els) => els.map((e) => e.textContent).join(""));

async function confirmCard(page) {
  await page.waitForSelector(".confirm-card", { state: "visible", timeout: T });
  return page.$eval(".confirm-card", (c) => ({
    title: c.querySelector(".confirm-title").textContent,
    tool: c.querySelector(".c-tool").textContent,
    target: c.querySelector(".c-target").textContent,
    risk: c.querySelector(".risk").textContent,
  }));
}

const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking"],
});
const problems = [];
try {
  // Two cookie jars: pods A and B share the host 127.0.0.1, and cookies do not tell ports apart.
  const ctxA = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const ctxB = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const a = await ctxA.newPage();
  const b = await ctxB.newPage();
  for (const [name, p] of [["A", a], ["B", b]]) {
    p.on("pageerror", (err) => problems.push(`${name} page error: ${err.message}`));
    p.on("console", (msg) => /Content Security Policy/i.test(msg.text()) && problems.push(msg.text()));
  }
  const resumes = { A: 0, B: 0 };
  a.on("request", (r) => r.method() === "POST" && r.url().endsWith("/resume") && resumes.A++);
  b.on("request", (r) => r.method() === "POST" && r.url().endsWith("/resume") && resumes.B++);

  // Pod A: sign in, pick the LangGraph agent, ask.
  await signIn(a, baseA, "alice");
  await a.waitForSelector("#agent option[value=lgops]", { state: "attached", timeout: T });
  await a.selectOption("#agent", "lgops");
  await a.fill("#input", "checkout is slow, restart it if it is unhealthy");
  await a.press("#input", "Enter");
  // The model's words stream in before the card.
  await a.waitForFunction(
    () => [...document.querySelectorAll(".run .bubble.assistant .text")].some((e) => e.textContent.includes("Let me check")),
    null,
    { timeout: T },
  );
  const cardA = await confirmCard(a);
  check(cardA.title === "Restart checkout", `card title from the graph's interrupt (${JSON.stringify(cardA)})`);
  check(cardA.tool === "restart_service" && cardA.target === "checkout", `card tool/target (${JSON.stringify(cardA)})`);
  check(/high/.test(cardA.risk), `card risk (${cardA.risk})`);
  const textAtCard = await runText(a);
  const hash = new URL(a.url()).hash;
  const runId = new URLSearchParams(hash.slice(1)).get("r");
  check(runId && runId.startsWith("run_"), `run id in the URL (${a.url()})`);
  log("card on pod A:", JSON.stringify(cardA));

  // Pod B: alice again, in another browser; the same run; approve there.
  await signIn(b, baseB, "alice");
  await b.goto(`${baseB}/${hash}`);
  await b.reload();
  await b.waitForSelector("#shell", { state: "visible", timeout: T });
  const cardB = await confirmCard(b);
  check(JSON.stringify(cardB) === JSON.stringify(cardA), `pod B shows the same card (${JSON.stringify(cardB)})`);
  await b.click(".confirm-card .approve");
  log("approved on pod B");

  // Pod A: the card closes (decided elsewhere), the rest streams to done.
  await a.waitForSelector(".confirm-card", { state: "detached", timeout: T });
  await a.waitForSelector('.run .decision-record[data-decision="approved"]', { timeout: T });
  const record = await a.textContent('.run .decision-record[data-decision="approved"]');
  check(/^Approved by alice at \d\d:\d\d — restart_service checkout/.test(record), `decision record on pod A (${record})`);
  await a.waitForFunction(() => document.querySelector("#run-status")?.textContent === "completed", null, { timeout: T });
  await a.waitForFunction(
    () => [...document.querySelectorAll(".run .bubble.assistant .text")].some((e) => e.textContent.includes("Done: checkout was restarted")),
    null,
    { timeout: T },
  );
  const text = await runText(a);
  const steps = await a.$$eval(".run .step", (els) => els.map((e) => [e.querySelector(".tool")?.textContent, e.dataset.status]));
  check(resumes.A === 0 && resumes.B === 1, `one approval, sent from pod B (${JSON.stringify(resumes)})`);
  check(problems.length === 0, `no page error or CSP violation: ${problems.join("; ")}`);
  console.log(`RESULT ${JSON.stringify({ runId, textAtCard, text, steps, card: cardA, record })}`);
  console.log("LGOPS-UI-OK");
} finally {
  await browser.close();
}
