// Drives the AI SDK page (tests/integration/aisdk_page, built by the test) in headless Chromium.
// The page is served from its own origin: every call to the gateways' /ai-sdk is cross-origin.
// On pod A: ask, the approval appears (a tool part in state approval-requested); Approve is
// double-clicked: the tool's output and the final text stream. Then a second question; after its
// first words the page is loaded again on pod B: useChat's resume (GET .../stream) brings the
// answer back and finishes it. Every rendering of the message list is recorded (a
// MutationObserver) for the test. Prints RESULT <json>.
// Usage: node aisdk_page_flow.mjs <page url> <gateway A> <gateway B> <token> <service>
import { chromium } from "playwright-core";

const [pageUrl, baseA, baseB, token, service] = process.argv.slice(2);
const T = 30_000;
const t0 = Date.now();
const log = (...a) => console.log(`[aisdk-page ${((Date.now() - t0) / 1000).toFixed(1)}s]`, ...a);

// Each distinct rendering of the message list: [[role, id, text], ...].
const RECORDER = () => {
  window.__renders = [];
  const record = () => {
    const list = document.getElementById("messages");
    if (!list) return;
    const now = [...list.querySelectorAll("li.message")].map((li) => [
      li.dataset.role,
      li.dataset.id,
      li.querySelector(".text")?.textContent ?? "",
    ]);
    const last = window.__renders.at(-1);
    if (!last || JSON.stringify(last) !== JSON.stringify(now)) window.__renders.push(now);
  };
  new MutationObserver(record).observe(document, { subtree: true, childList: true, characterData: true });
  // Every status the page showed since it loaded (useChat's: ready, submitted, streaming, error).
  window.__statuses = [];
  new MutationObserver(() => {
    const now = document.getElementById("status")?.dataset.status;
    if (now && window.__statuses.at(-1) !== now) window.__statuses.push(now);
  }).observe(document, { subtree: true, childList: true, attributes: true, attributeFilter: ["data-status"] });
};

const pageFor = (base, chat) => {
  const url = new URL(pageUrl);
  url.searchParams.set("api", `${base}/ai-sdk/opspilot/chat`);
  url.searchParams.set("token", token);
  if (chat) url.searchParams.set("chat", chat);
  return url.toString();
};

const messages = (page) =>
  page.$$eval("li.message", (els) =>
    els.map((li) => [li.dataset.role, li.dataset.id, li.querySelector(".text").textContent]),
  );
const tools = (page) =>
  page.$$eval("span.tool", (els) => els.map((s) => [s.dataset.tool, s.dataset.state, s.textContent]));

const ready = (page) =>
  page.waitForFunction(() => document.getElementById("status")?.dataset.status === "ready", null, {
    timeout: T,
  });

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
    if (r.url().includes("/ai-sdk/") && r.method() !== "OPTIONS") {
      const body = r.postData() ? JSON.parse(r.postData()) : null;
      requests.push({ method: r.method(), url: r.url(), last: body?.messages?.at(-1)?.role ?? null });
    }
  });

  await page.goto(pageFor(baseA));
  await page.fill("#input", `restart the abnormal ${service} instance`);
  await page.click("#send");
  await page.waitForSelector("#approval", { timeout: T });
  result.approval = await page.$eval("#approval", (el) => ({ id: el.dataset.id, tool: el.dataset.tool }));
  result.chat = await page.$eval("#status", (el) => el.dataset.chat);
  log("approval on pod A", result.approval.id);
  await page.dblclick("#approve");
  await page.waitForSelector("#approval", { state: "detached", timeout: T });
  await ready(page);
  result.afterApproval = await messages(page);
  result.tools = await tools(page);
  log("approved");

  // A second question, and a reload on the other pod after its first words.
  await page.fill("#input", `how is ${service} doing?`);
  await page.click("#send");
  await page.waitForFunction(
    () => {
      const li = [...document.querySelectorAll("li.message")];
      return li.length === 4 && li[3].dataset.role === "assistant" && li[3].querySelector(".text").textContent;
    },
    null,
    { timeout: T },
  );
  result.beforeReload = await messages(page);
  const cutRenders = await page.evaluate(() => window.__renders);
  await page.goto(pageFor(baseB, result.chat));
  await page.waitForFunction(
    () => {
      const li = [...document.querySelectorAll("li.message")];
      const status = document.getElementById("status")?.dataset.status;
      return li.length === 4 && window.__statuses.includes("streaming") && status === "ready";
    },
    null,
    { timeout: T },
  );
  // The resumed stream ends with `finish`: the text is whole when the status is back to ready.
  result.final = await messages(page);
  const shown = await page.$("#error");
  if (shown) problems.push(`error on the page: ${await shown.textContent()}`);
  result.renders = [...cutRenders, ...(await page.evaluate(() => window.__renders))];
  result.requests = requests;
} catch (err) {
  problems.push(String(err?.stack ?? err));
} finally {
  await browser.close();
}
result.problems = problems;
console.log(`RESULT ${JSON.stringify(result)}`);
