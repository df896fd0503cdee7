// Drives the demo web UI in headless Chromium (playwright-core, Debian's chromium):
// approve flow, reload mid-run, and a second tab whose card closes when the first approves.
// Usage: node ui_flow.mjs <gateway url> <service for reload flow> <service for two-tab flow> <png>
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { chromium } from "playwright-core";

const [base, reloadService, tabsService, screenshot] = process.argv.slice(2);
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

  // 1. Steps, the confirmation card, approve, the final answer.
  await send(page, "restart the abnormal payment-api instance");
  await page.waitForSelector(".step", { timeout: T });
  const card = await waitCard(page);
  check(card.target.includes("payment-api"), `card names the target (${card.target})`);
  check(card.risk.trim().length > 0, "card shows the risk");
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
  console.log("UI-FLOW-OK");
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
