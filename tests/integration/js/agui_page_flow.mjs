// Drives an AG-UI page (tests/integration/agui_page or copilotkit_page, built by the test; both
// render the same elements) in headless Chromium. The page is served from its own origin: every
// call to the gateways' /agui is cross-origin (CORS).
// On pod A: ask, the approval card appears (RUN_FINISHED outcome interrupt). The page is loaded
// again on pod B while the card waits: it finds its run again (connectAgent, Tether's reconnect)
// and shows the same card. Approve is double-clicked there: the run finishes, once. Every
// rendering of the message list is recorded (a MutationObserver) for the test. Prints RESULT <json>.
// Usage: node agui_page_flow.mjs <page url> <gateway A> <gateway B> <token> <service>
import { chromium } from "playwright-core";

const [pageUrl, baseA, baseB, token, service] = process.argv.slice(2);
const T = 30_000;
const t0 = Date.now();
const log = (...a) => console.log(`[agui-page ${((Date.now() - t0) / 1000).toFixed(1)}s]`, ...a);

// Each distinct rendering of the message list: [[role, id, text], ...].
const RECORDER = () => {
  window.__renders = [];
  const record = () => {
    const list = document.getElementById("messages");
    if (!list) return;
    const now = [...list.querySelectorAll("li.message")].map((li) => [li.dataset.role, li.dataset.id, li.textContent]);
    const last = window.__renders.at(-1);
    if (!last || JSON.stringify(last) !== JSON.stringify(now)) window.__renders.push(now);
  };
  new MutationObserver(record).observe(document, { subtree: true, childList: true, characterData: true });
};

const pageFor = (base, thread) => {
  const url = new URL(pageUrl);
  url.searchParams.set("api", `${base}/agui/opspilot`);
  url.searchParams.set("token", token);
  if (thread) url.searchParams.set("thread", thread);
  return url.toString();
};

const messages = (page) =>
  page.$$eval("li.message", (els) => els.map((li) => [li.dataset.role, li.dataset.id, li.textContent]));

const card = async (page) => {
  await page.waitForSelector("#interrupt", { timeout: T });
  return page.$eval("#interrupt", (el) => ({
    id: el.dataset.id,
    reason: el.dataset.reason,
    message: el.querySelector("#interrupt-message").textContent,
  }));
};

const idle = (page) =>
  page.waitForFunction(
    () => document.getElementById("status")?.dataset.running === "false" && !document.getElementById("interrupt"),
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
const result = {};
try {
  const ctx = await browser.newContext();
  await ctx.addInitScript(RECORDER);
  const page = await ctx.newPage();
  page.on("pageerror", (err) => problems.push(`page error: ${err.message}`));
  page.on("console", (msg) => msg.type() === "error" && problems.push(`console: ${msg.text()}`));
  const requests = [];
  page.on("request", (r) => {
    if (r.url().includes("/agui/") && r.method() !== "OPTIONS") {
      requests.push({ method: r.method(), url: r.url(), body: r.postData() });
    }
  });

  await page.goto(pageFor(baseA));
  await page.fill("#input", `restart the abnormal ${service} instance`);
  await page.click("#send");
  result.before = await card(page);
  result.thread = await page.$eval("#status", (el) => el.dataset.thread);
  result.atCard = await messages(page);
  log("card on pod A", result.before.id);

  // A reload on the other pod while the card waits: the same card again.
  await page.goto(pageFor(baseB, result.thread));
  result.after = await card(page);
  result.afterReload = await messages(page);
  log("card again on pod B", result.after.id);

  await page.dblclick("#approve");
  await idle(page);
  const shown = await page.$("#error");
  if (shown) problems.push(`error on the page: ${await shown.textContent()}`);
  result.final = await messages(page);
  result.renders = await page.evaluate(() => window.__renders);
  result.requests = requests.map(({ method, url, body }) => ({
    method,
    url,
    resume: body ? (JSON.parse(body).resume ?? null) : null,
  }));
} catch (err) {
  problems.push(String(err?.stack ?? err));
} finally {
  await browser.close();
}
result.problems = problems;
console.log(`RESULT ${JSON.stringify(result)}`);
