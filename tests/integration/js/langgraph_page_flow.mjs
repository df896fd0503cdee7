// Drives the useStream page (tests/integration/langgraph_page, built by the test) in headless
// Chromium. The page is served from its own origin: every call to the gateways' /langgraph is
// cross-origin (CORS). Flow 1, on pod A: ask, the interrupt appears (useStream's `interrupt`),
// Approve resumes it (`submit(undefined, {command: {resume: true}})`), the run finishes. Flow 2:
// ask for a long stream on pod A, and in the middle of it load the page again on pod B: it
// rejoins the run (reconnectOnMount, joinStream) and streams it to the end. Every rendering of
// the message list is recorded (a MutationObserver) for the test to check that no message is
// ever shown twice, out of order or cut. Prints RESULT <json>.
// Usage: node langgraph_page_flow.mjs <page url> <gateway A> <gateway B> <token> <service> <deltas>
import { chromium } from "playwright-core";

const [pageUrl, baseA, baseB, token, service, deltas] = process.argv.slice(2);
const T = 30_000;
const t0 = Date.now();
const log = (...a) => console.log(`[lg-page ${((Date.now() - t0) / 1000).toFixed(1)}s]`, ...a);

function check(cond, message) {
  if (!cond) throw new Error(`check failed: ${message}`);
}

// Each distinct rendering of the message list: [[type, id, text], ...].
const RECORDER = () => {
  window.__renders = [];
  const record = () => {
    const list = document.getElementById("messages");
    if (!list) return;
    const now = [...list.querySelectorAll("li.message")].map((li) => [li.dataset.type, li.dataset.id, li.textContent]);
    const last = window.__renders.at(-1);
    if (!last || JSON.stringify(last) !== JSON.stringify(now)) window.__renders.push(now);
  };
  new MutationObserver(record).observe(document, { subtree: true, childList: true, characterData: true });
};

async function noError(page) {
  const shown = await page.$("#error");
  check(!shown, `no error on the page: ${shown && (await shown.textContent())}`);
}

const pageFor = (base, thread) => {
  const url = new URL(pageUrl);
  url.searchParams.set("api", `${base}/langgraph`);
  url.searchParams.set("token", token);
  if (thread) url.searchParams.set("thread", thread);
  return url.toString();
};

const messages = (page) =>
  page.$$eval("li.message", (els) => els.map((li) => [li.dataset.type, li.dataset.id, li.textContent]));

const idle = (page) =>
  page.waitForFunction(
    () => document.getElementById("status")?.dataset.loading === "false" && !document.getElementById("interrupt"),
    null,
    { timeout: T },
  );

log("launching chromium");
const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking"],
});
const problems = [];
try {
  const ctx = await browser.newContext();
  await ctx.addInitScript(RECORDER);
  const page = await ctx.newPage();
  page.on("pageerror", (err) => problems.push(`page error: ${err.message}`));
  page.on("console", (msg) => msg.type() === "error" && problems.push(`console: ${msg.text()}`));
  const joins = [];
  page.on("request", (r) => {
    if (r.method() === "GET" && /\/runs\/[^/]+\/stream/.test(r.url())) {
      joins.push({ url: r.url(), lastEventId: r.headers()["last-event-id"] ?? null });
    }
  });

  // Flow 1: the interrupt, approved from the page.
  await page.goto(pageFor(baseA));
  await page.fill("#input", `restart the abnormal ${service} instance`);
  await page.click("#send");
  await page.waitForSelector("#interrupt", { state: "visible", timeout: T });
  const interrupt = {
    title: await page.textContent("#interrupt-title"),
    kind: await page.textContent("#interrupt-kind"),
  };
  log("interrupt shown:", JSON.stringify(interrupt));
  const atInterrupt = await messages(page);
  const thread1 = await page.getAttribute("#status", "data-thread");
  await page.click("#approve");
  await page.waitForSelector("#interrupt", { state: "detached", timeout: T });
  await idle(page);
  log("resumed to the end");
  const resumed = await messages(page);
  const renders1 = await page.evaluate(() => window.__renders);
  await noError(page);

  // Flow 2: a long stream on pod A, the page loaded again on pod B in the middle of it.
  await page.goto(pageFor(baseA));
  log("page loaded again on pod A");
  await page.fill("#input", `stream ${deltas} deltas`);
  await page.click("#send");
  log("asked for the long stream");
  await page.waitForFunction(
    () => [...document.querySelectorAll("li.message[data-type=ai]")].some((li) => li.textContent.includes("t20 ")),
    null,
    { timeout: T },
  );
  const thread2 = new URL(page.url()).searchParams.get("thread");
  check(thread2 && thread2 !== thread1, `a new thread in the URL (${page.url()})`);
  const stored = await page.evaluate((t) => sessionStorage.getItem(`lg:stream:${t}`), thread2);
  const rendersBefore = await page.evaluate(() => window.__renders);
  const atReload = await messages(page);
  const joinsBefore = joins.length;
  log("loading the page again on pod B, mid-stream");
  await page.goto(pageFor(baseB, thread2));
  await page.waitForFunction(
    (n) =>
      document.getElementById("status")?.dataset.loading === "false" &&
      [...document.querySelectorAll("li.message[data-type=ai]")].some((li) => li.textContent.endsWith(`t${n - 1} `)),
    Number(deltas),
    { timeout: T },
  );
  log("rejoined stream ended");
  const rendersAfter = await page.evaluate(() => window.__renders);
  const final = await messages(page);
  const storedAfter = await page.evaluate((t) => sessionStorage.getItem(`lg:stream:${t}`), thread2);
  await noError(page);

  console.log(
    `RESULT ${JSON.stringify({
      interrupt,
      thread1,
      atInterrupt,
      resumed,
      renders1,
      thread2,
      stored,
      storedAfter,
      atReload,
      rendersBefore,
      rendersAfter,
      final,
      rejoins: joins.slice(joinsBefore),
      problems,
    })}`,
  );
} finally {
  await browser.close();
}
