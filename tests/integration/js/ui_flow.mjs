// Drives the demo web UI in headless Chromium (playwright-core, Debian's chromium): the agent
// picker, approve flow, reload mid-run, a second tab whose card closes when the first approves,
// and (on mocked routes serving events the test built with the real serializers) tool progress,
// the outcome_unknown card's three answers and the confirm card's title, details and preview.
// Usage: node ui_flow.mjs <gateway url> <service for reload flow> <service for two-tab flow> <png>
//        <mocked runs json>
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { chromium } from "playwright-core";

const [base, reloadService, tabsService, screenshot, mockFile] = process.argv.slice(2);
const T = 20_000;
const log = (...a) => console.log("[ui]", ...a);

function check(cond, message) {
  if (!cond) throw new Error(`check failed: ${message}`);
}

async function send(page, text) {
  await page.fill("#input", text);
  await page.press("#input", "Enter");
}

async function waitCard(page) {
  await page.waitForSelector(".confirm-card", { state: "visible", timeout: T });
  const target = await page.textContent(".confirm-card .c-target");
  const risk = await page.textContent(".confirm-card .risk");
  const expiry = await page.textContent(".confirm-card .expiry");
  check(/Expires in \d\d:\d\d/.test(expiry), `countdown shown (${expiry})`);
  return { target, risk };
}

async function waitCompleted(page) {
  await page.waitForFunction(
    () => document.querySelector("#run-status")?.textContent === "completed",
    null,
    { timeout: T },
  );
  const text = await page.textContent(".run .bubble.assistant .text");
  check(text && text.trim().length > 0, "final answer streamed");
  return text.trim();
}

const profile = mkdtempSync(join(tmpdir(), "tether-chromium-"));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: "/usr/bin/chromium",
  headless: true,
  viewport: { width: 1280, height: 800 },
  args: [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
});
try {
  const page = context.pages()[0] ?? (await context.newPage());
  page.on("pageerror", (err) => log("page error:", err.message));

  // Sign in through the dev-only token endpoint.
  await page.goto(base);
  await page.fill("#login-user", "alice");
  await page.click("#login-form button[type=submit]");
  await page.waitForSelector("#shell", { state: "visible", timeout: T });
  const starts = [];
  page.on("request", (req) => {
    if (req.method() === "POST" && /\/v1\/conversations\/[^/]+\/runs$/.test(req.url())) {
      starts.push(req.postDataJSON());
    }
  });

  // 0. The agent picker lists the runtime's agents, the default (OpsPilot) selected.
  await page.waitForSelector("#agent option[value=opspilot]", { state: "attached", timeout: T });
  check(await page.isVisible("#agent"), "agent picker shown");
  const agents = await page.$$eval("#agent option", (els) => els.map((e) => e.value));
  check(agents.includes("opspilot"), `picker lists opspilot (${agents})`);
  check((await page.inputValue("#agent")) === "opspilot", "the default agent is selected");

  // 1. Steps, the confirmation card, approve, the final answer.
  await send(page, "restart the abnormal payment-api instance");
  await page.waitForSelector(".step", { timeout: T });
  const card = await waitCard(page);
  check(card.target.includes("payment-api"), `card names the target (${card.target})`);
  check(card.risk.trim().length > 0, "card shows the risk");
  check(starts.length === 1 && starts[0].agent === "opspilot", `start names the agent: ${JSON.stringify(starts)}`);
  const title = await page.textContent(".confirm-card .confirm-title");
  check(title === "Restart instance", `the agent's card title (${title})`);
  const preview = await page.textContent(".confirm-card .c-preview");
  check((preview || "").includes("status now: abnormal"), `the card's preview (${preview})`);
  const steps = await page.$$eval(".step", (els) => els.map((e) => e.dataset.status));
  check(steps.length >= 1 && steps.every((s) => s === "success"), `steps done: ${steps}`);
  await page.screenshot({ path: screenshot });
  await page.click(".confirm-card .approve");
  check(await page.isDisabled(".confirm-card .approve").catch(() => true), "approve disabled");
  await page.waitForSelector(".confirm-card", { state: "detached", timeout: T });
  await page.waitForSelector(".resolved-note", { timeout: T });
  const answer1 = await waitCompleted(page);
  log("flow 1 answer:", answer1.slice(0, 120));

  // 2. Reload mid-run (waiting for approval): the page reads the run and continues.
  await page.click("#new-conversation");
  await send(page, `restart the abnormal ${reloadService} instance`);
  await waitCard(page);
  const before = await page.$$eval(".step", (els) => els.length);
  const textBefore = await page.textContent(".run .bubble.assistant .text");
  check(page.url().includes("r=run_"), `run id kept in the URL (${page.url()})`);
  await page.reload();
  await page.waitForSelector("#shell", { state: "visible", timeout: T });
  await waitCard(page);
  const after = await page.$$eval(".step", (els) => els.length);
  check(after === before, `steps restored once after reload (${before} -> ${after})`);
  const textAfter = await page.textContent(".run .bubble.assistant .text");
  check(textAfter === textBefore, "streamed text restored exactly after reload");
  await page.click(".confirm-card .approve");
  const answer2 = await waitCompleted(page);
  log("flow 2 answer:", answer2.slice(0, 120));

  // 3. Two tabs on one run: approving in one closes the card in the other.
  await page.click("#new-conversation");
  await send(page, `restart the abnormal ${tabsService} instance`);
  await waitCard(page);
  const other = await context.newPage();
  await other.goto(page.url());
  await waitCard(other);
  await page.click(".confirm-card .approve");
  await other.waitForSelector(".confirm-card", { state: "detached", timeout: T });
  const note = await other.textContent(".resolved-note");
  check(/Approved/.test(note), `second tab shows the decision (${note})`);
  await waitCompleted(page);
  await waitCompleted(other);
  log("flow 3: second tab's card closed:", note);
  await other.close();

  // 4. What the engine does not raise yet, from mocked routes: a tool's progress bar, the
  //    outcome_unknown card (each answer posts its decision), the confirm card's extra fields.
  const mock = JSON.parse(readFileSync(mockFile, "utf8"));
  const resumes = [];
  for (const [id, m] of Object.entries(mock.runs)) {
    await page.route(`**/v1/runs/${id}`, (r) => r.fulfill({ json: { run: m.run } }));
    await page.route(`**/v1/runs/${id}/events`, (r) =>
      r.fulfill({ status: 200, contentType: "text/event-stream", body: m.sse }),
    );
    await page.route(`**/v1/runs/${id}/resume`, (r) => {
      resumes.push(r.request().postDataJSON());
      return r.fulfill({ status: 202, json: { run: m.run, replayed: false } });
    });
  }
  await page.route(`**/v1/conversations/${mock.conversationId}/messages`, (r) =>
    r.fulfill({ json: { messages: [], nextPageToken: null } }),
  );
  const step = '.step[data-call="call_ui_1"]';
  for (const [button, decision] of [
    ["retry", "retry"],
    ["mark-done", "mark_done"],
    ["abandon", "abandon"],
  ]) {
    await page.goto(`${base}/#c=${mock.conversationId}&r=run_ui_unknown`);
    await page.reload(); // a fresh page each time: the card is drawn again from the run
    await page.waitForSelector(".outcome-card", { state: "visible", timeout: T });
    const question = await page.textContent(".outcome-card .o-question");
    check(
      question === "We don't know whether restart_instance on instance payment-api-2 (payment-api/prod) happened.",
      `outcome question (${question})`,
    );
    const labels = await page.$$eval(".outcome-card .confirm-foot button", (els) => els.map((e) => e.textContent));
    check(labels.join("|") === "Abandon|Mark done|Retry", `three answers (${labels})`);
    await page.waitForSelector(`${step} .progress`, { timeout: T });
    const width = await page.$eval(`${step} .progress-bar`, (e) => e.style.width);
    const ptext = await page.textContent(`${step} .progress-text`);
    check(width === "40%" && ptext === "draining connections", `progress drawn (${width}, ${ptext})`);
    await page.click(`.outcome-card .${button}`);
    // The card says it was sent once the POST is answered, so the route has seen it by then.
    await page.waitForFunction(
      (sent) => document.querySelector(".outcome-card .expiry")?.textContent === sent,
      { retry: "Retrying…", mark_done: "Marked done, continuing…", abandon: "Abandoned, continuing…" }[decision],
      { timeout: T },
    );
    check(await page.isDisabled(".outcome-card .retry"), "answers disabled once sent");
    const last = resumes.shift();
    check(
      last && last.decision === decision && last.interruptId === "int_run_ui_unknown",
      `${button} posts ${decision} (${JSON.stringify(last)})`,
    );
  }
  log("flow 4: outcome_unknown card posts retry, mark_done, abandon; progress bar drawn");
  await page.goto(`${base}/#c=${mock.conversationId}&r=run_ui_confirm`);
  await page.reload();
  await page.waitForSelector(".confirm-card", { state: "visible", timeout: T });
  const fields = await page.$eval(".confirm-card", (c) => ({
    title: c.querySelector(".confirm-title").textContent,
    details: c.querySelector(".c-details").textContent,
    detailsShown: !c.querySelector(".c-details").hidden,
    preview: c.querySelector(".c-preview").textContent,
    previewShown: !c.querySelector(".c-preview").hidden,
  }));
  check(
    fields.title === "Restart payment-api-2?" &&
      fields.details === "Its open connections are dropped." &&
      fields.detailsShown &&
      fields.preview === "POST /instances/payment-api-2/restart" &&
      fields.previewShown,
    `confirm card fields (${JSON.stringify(fields)})`,
  );
  log("flow 4: confirm card shows title, details, preview");
  console.log("UI-FLOW-OK");
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
