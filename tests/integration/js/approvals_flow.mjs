// The approvals page in headless Chromium (playwright-core, Debian's chromium): carol, an
// approver, signs in and opens Approvals; when the test (stdin: a run id) makes another user's
// run pause at a restart card, the card appears live with who asked and the run's steps so far;
// carol approves it and it leaves her inbox. Cookie session only, a CSRF token on the write, no
// CSP violation. Usage: node approvals_flow.mjs <gateway url> <png>
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";

import { chromium } from "playwright-core";

const [base, screenshot] = process.argv.slice(2);
const T = 20_000;
const stdin = createInterface({ input: process.stdin });
const nextLine = () => new Promise((resolve) => stdin.once("line", resolve));
function check(cond, message) {
  if (!cond) throw new Error(`check failed: ${message}`);
}

const profile = mkdtempSync(join(tmpdir(), "tether-chromium-"));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: "/usr/bin/chromium",
  headless: true,
  viewport: { width: 1280, height: 800 },
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"],
});
const violations = [];
await context.exposeBinding("__tetherCspViolation", (_source, v) => violations.push(v));
await context.addInitScript(() => {
  document.addEventListener("securitypolicyviolation", (e) =>
    window.__tetherCspViolation(`${e.violatedDirective} ${e.blockedURI} ${e.sourceFile}:${e.lineNumber}`),
  );
});
const authProblems = [];
context.on("request", (req) => {
  const url = new URL(req.url());
  if (!url.pathname.startsWith("/v1/")) return;
  const headers = req.headers();
  const login = req.method() === "POST" && url.pathname === "/v1/session";
  if (headers.authorization && !login) authProblems.push(`bearer sent: ${req.method()} ${url.pathname}`);
  if (!["GET", "HEAD"].includes(req.method()) && !login && url.pathname !== "/v1/dev/token" && !headers["x-csrf-token"]) {
    authProblems.push(`no CSRF token: ${req.method()} ${url.pathname}`);
  }
});
try {
  const page = context.pages()[0] ?? (await context.newPage());
  page.on("console", (msg) => /Content Security Policy/i.test(msg.text()) && violations.push(msg.text()));
  await page.goto(base);
  await page.fill("#login-user", "carol");
  await page.click("#login-form button[type=submit]");
  await page.waitForSelector("#shell", { state: "visible", timeout: T });
  await page.click("#open-approvals");
  await page.waitForSelector("#approvals", { state: "visible", timeout: T });
  await page.waitForSelector("#approvals-empty", { state: "visible", timeout: T });
  console.log("READY");
  const [runId, requester] = (await nextLine()).trim().split(" ");
  const sel = `.approval-card[data-run="${runId}"]`;
  await page.waitForSelector(sel, { state: "visible", timeout: T });
  const card = await page.$eval(sel, (c) => ({
    requester: c.querySelector(".a-requester")?.textContent,
    tool: c.querySelector(".c-tool")?.textContent,
    steps: [...c.querySelectorAll(".a-step")].map((s) => s.textContent),
  }));
  check(card.requester === requester, `the card says who asked (${JSON.stringify(card)})`);
  check(card.tool === "restart_instance", `the card names the tool (${card.tool})`);
  check(card.steps.length >= 2 && card.steps.at(-1) === "restart_instance · proposed", `the run's steps (${card.steps})`);
  check((await page.textContent("#approvals-count")) === "1", "the sidebar counts the waiting card");
  await page.screenshot({ path: screenshot });
  await page.click(`${sel} .approve`);
  await page.waitForSelector(sel, { state: "detached", timeout: T });
  check(authProblems.length === 0, `cookie session only, CSRF on writes: ${authProblems.join("; ")}`);
  check(violations.length === 0, `no CSP violation: ${violations.join("; ")}`);
  console.log("APPROVALS-FLOW-OK");
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
  stdin.close();
}
