// Drives the demo web UI in headless Chromium (playwright-core, Debian's chromium) against the
// real runtime and gateway: the agent picker, approve flow, reload mid-run, a second tab whose
// card closes when the first approves, OpsPilot's select card (two abnormal instances) and input
// form (a replica count: the browser's own check, then the server's 422 shown next to the form,
// then a valid answer), and, with the ledger test agent, a tool's progress bar in its step and a
// real outcome_unknown card after the runtime is killed mid-call (the test kills it when this
// script prints KILL-NOW, and answers on stdin once a new runtime serves). All of it on the cookie
// session, under the page's Content-Security-Policy: no token readable by scripts, no bearer
// after the login, a CSRF token on every write, no CSP violation; then sign-out, and a sign-in
// with a pasted token. A second message while a run of the conversation waits is shown waiting.
// Usage: node ui_flow.mjs <gateway url> <service for reload flow> <service for two-tab flow>
//        <service with two abnormal instances> <service to scale> <png> [<folder for more pngs>]
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";

import { chromium } from "playwright-core";

const [base, reloadService, tabsService, selectService, scaleService, screenshot, shots] = process.argv.slice(2);
const T = 20_000;
const log = (...a) => console.log("[ui]", ...a);
const stdin = createInterface({ input: process.stdin });
const nextLine = () => new Promise((resolve) => stdin.once("line", resolve));

function check(cond, message) {
  if (!cond) throw new Error(`check failed: ${message}`);
}
// No bearer token in any storage a script can read, and the session cookie not in document.cookie.
async function checkNoTokenExposed(page, where) {
  const exposed = await page.evaluate(() => {
    const stores = { localStorage, sessionStorage };
    const found = [];
    for (const [name, store] of Object.entries(stores)) {
      for (let i = 0; i < store.length; i++) {
        const key = store.key(i);
        const value = store.getItem(key) || "";
        if (/token|session|auth/i.test(key) || /eyJ[\w-]+\.[\w-]+\./.test(value)) found.push(`${name}.${key}`);
      }
    }
    if (/tether_session|eyJ/.test(document.cookie)) found.push(`document.cookie=${document.cookie}`);
    return found;
  });
  check(exposed.length === 0, `${where}: no token readable by scripts (${exposed})`);
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

// The run's streamed text, all of its bubbles (text before a card, and the answer after it).
const runText = (page) =>
  page.$$eval(".run .bubble.assistant .text", (els) => els.map((e) => e.textContent).join("\n"));

async function waitCompleted(page) {
  await page.waitForFunction(
    () => document.querySelector("#run-status")?.textContent === "completed",
    null,
    { timeout: T },
  );
  const text = await runText(page);
  check(text && text.trim().length > 0, "final answer streamed");
  return text.trim();
}

// A decided card stays where it was, as one line: what was decided, by whom, when, about what.
async function decisionRecord(page, decision) {
  const sel = `.run .decision-record[data-decision="${decision}"]`;
  await page.waitForSelector(sel, { timeout: T });
  return page.$eval(sel, (rec) => {
    const run = rec.closest(".run");
    const blocks = [...run.children];
    const at = blocks.indexOf(rec.closest(".card-slot"));
    const kinds = blocks.map((b) => (b.matches(".steps") ? "steps" : b.matches(".bubble") ? "text" : b.matches(".card-slot") ? "card" : "note"));
    return {
      text: rec.textContent,
      who: rec.querySelector(".d-who")?.textContent,
      when: rec.querySelector(".d-when")?.textContent,
      datetime: rec.querySelector(".d-when")?.dateTime,
      what: rec.querySelector(".d-what")?.textContent,
      before: kinds.slice(0, at),
      after: kinds.slice(at + 1),
      lastAnswer: [...run.querySelectorAll(".bubble.assistant")].at(-1)?.compareDocumentPosition(rec),
    };
  });
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
// Every Content-Security-Policy violation in any page (a listener installed before the page's
// own scripts, reporting through a binding: both outside the page's policy), and any console
// message about one.
const violations = [];
await context.exposeBinding("__tetherCspViolation", (_source, v) => violations.push(v));
await context.addInitScript(() => {
  document.addEventListener("securitypolicyviolation", (e) =>
    window.__tetherCspViolation(`${e.violatedDirective} ${e.blockedURI} ${e.sourceFile}:${e.lineNumber}`),
  );
});
// The bearer travels once, to POST /v1/session; every other call rides on the cookie, and each
// state-changing one carries the session's CSRF token.
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
const watchConsole = (p) =>
  p.on("console", (msg) => /Content Security Policy/i.test(msg.text()) && violations.push(msg.text()));
try {
  const page = context.pages()[0] ?? (await context.newPage());
  page.on("pageerror", (err) => log("page error:", err.message));
  watchConsole(page);

  // Sign in through the dev-only token endpoint: the token is traded for the session cookie.
  await page.goto(base);
  await checkNoTokenExposed(page, "before sign-in");
  await page.fill("#login-user", "alice");
  await page.click("#login-form button[type=submit]");
  await page.waitForSelector("#shell", { state: "visible", timeout: T });
  check((await page.textContent("#me-name")) === "alice", "signed in as alice");
  await checkNoTokenExposed(page, "after sign-in");
  const session = (await context.cookies()).find((c) => c.name === "tether_session");
  check(session?.httpOnly && session.sameSite === "Strict", `HttpOnly, SameSite=Strict session (${JSON.stringify(session)})`);
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
  const fields = await page.$eval(".confirm-card", (c) => ({
    title: c.querySelector(".confirm-title").textContent,
    details: c.querySelector(".c-details").textContent,
    detailsShown: !c.querySelector(".c-details").hidden,
    preview: c.querySelector(".c-preview").textContent,
    previewShown: !c.querySelector(".c-preview").hidden,
  }));
  check(
    fields.title === "Restart instance" &&
      fields.detailsShown &&
      fields.details.length > 0 &&
      fields.previewShown &&
      fields.preview.startsWith("status now: abnormal"),
    `confirm card title, details, preview (${JSON.stringify(fields)})`,
  );
  const steps = await page.$$eval(".step", (els) => els.map((e) => e.dataset.status));
  check(steps.length >= 1 && steps.every((s) => s === "success"), `steps done: ${steps}`);
  await page.screenshot({ path: screenshot });
  await page.click(".confirm-card .approve");
  check(await page.isDisabled(".confirm-card .approve").catch(() => true), "approve disabled");
  await page.waitForSelector(".confirm-card", { state: "detached", timeout: T });
  await page.waitForSelector(".resolved-note", { timeout: T });
  const answer1 = await waitCompleted(page);
  log("flow 1 answer:", answer1.slice(0, 120));
  // The card became its record in place: after the steps that led to it, before the answer.
  const rec1 = await decisionRecord(page, "approved");
  check(
    /^Approved by alice at \d\d:\d\d — restart_instance .*payment-api-\d+/.test(rec1.text) &&
      rec1.who === "alice" &&
      rec1.what.startsWith("restart_instance ") &&
      rec1.what.includes(card.target) &&
      rec1.when === new Date(rec1.datetime).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", hourCycle: "h23" }),
    `a compact record of the decision (${JSON.stringify(rec1)})`,
  );
  check(
    rec1.before.includes("steps") && rec1.after.includes("text") && rec1.after.at(-1) === "note" &&
      rec1.lastAnswer === 2 /* DOCUMENT_POSITION_PRECEDING: the record comes first */,
    `the record stays where the card was, before the final answer (${JSON.stringify(rec1)})`,
  );
  check((await page.$$(".resolved-note")).length === 1, "one record, no note after the answer");
  if (shots) await page.screenshot({ path: join(shots, "decided.png") });
  const usage = await page.textContent(".run .run-note");
  check(/\d+ tokens in, \d+ out, \d+ model steps\./.test(usage), `usage shown (${usage})`);

  // 2. Reload mid-run (waiting for approval): the page reads the run and continues.
  await page.click("#new-conversation");
  await send(page, `restart the abnormal ${reloadService} instance`);
  await waitCard(page);
  const before = await page.$$eval(".step", (els) => els.length);
  const textBefore = await runText(page);
  check(page.url().includes("r=run_"), `run id kept in the URL (${page.url()})`);
  await page.reload();
  await page.waitForSelector("#shell", { state: "visible", timeout: T });
  await checkNoTokenExposed(page, "after reload");
  await waitCard(page);
  const after = await page.$$eval(".step", (els) => els.length);
  check(after === before, `steps restored once after reload (${before} -> ${after})`);
  const textAfter = await runText(page);
  check(textAfter === textBefore, "streamed text restored exactly after reload");
  await page.click(".confirm-card .approve");
  const answer2 = await waitCompleted(page);
  log("flow 2 answer:", answer2.slice(0, 120));

  // 3. Two tabs on one run: approving in one closes the card in the other.
  await page.click("#new-conversation");
  await send(page, `restart the abnormal ${tabsService} instance`);
  await waitCard(page);
  const other = await context.newPage();
  watchConsole(other);
  await other.goto(page.url());
  await waitCard(other);
  await page.click(".confirm-card .approve");
  await other.waitForSelector(".confirm-card", { state: "detached", timeout: T });
  const note = await other.textContent(".resolved-note");
  check(/^Approved by alice at \d\d:\d\d — restart_instance /.test(note), `second tab shows who decided (${note})`);
  await waitCompleted(page);
  await waitCompleted(other);
  log("flow 3: second tab's card closed:", note);
  await other.close();

  // 4. Two abnormal instances: the select card, a choice, then the confirm card for that one.
  const resumes = [];
  page.on("request", (req) => {
    if (req.method() === "POST" && req.url().endsWith("/resume")) resumes.push(req.postDataJSON());
  });
  await page.click("#new-conversation");
  await send(page, `restart the abnormal ${selectService} instance`);
  await page.waitForSelector(".select-card", { state: "visible", timeout: T });
  const select = await page.$eval(".select-card", (c) => ({
    title: c.querySelector(".confirm-title").textContent,
    prompt: c.querySelector(".q-prompt").textContent,
    values: [...c.querySelectorAll(".q-option input")].map((i) => i.value),
    labels: [...c.querySelectorAll(".q-option-label")].map((e) => e.textContent),
    chooseDisabled: c.querySelector(".q-submit").disabled,
    chooseText: c.querySelector(".q-submit").textContent,
  }));
  check(select.title === `Restart which ${selectService} instance?`, `select title (${select.title})`);
  check(/Which one/.test(select.prompt), `select prompt (${select.prompt})`);
  check(
    select.values.join() === `${selectService}-1,${selectService}-2` &&
      select.labels.every((l, i) => l.startsWith(select.values[i])),
    `one option per instance (${JSON.stringify(select)})`,
  );
  check(select.chooseDisabled && select.chooseText === "Choose", "Choose waits for a pick");
  if (shots) await page.screenshot({ path: join(shots, "select.png") });
  await page.check(`.select-card input[value="${selectService}-2"]`);
  await page.click(".select-card .q-submit");
  await page.waitForSelector(".select-card", { state: "detached", timeout: T });
  const picked = resumes.shift();
  check(picked?.decision === "respond" && picked.option === `${selectService}-2`, `posts the option (${JSON.stringify(picked)})`);
  const picked1 = await decisionRecord(page, "responded");
  check(
    picked1.text.startsWith(`Answered by alice at ${picked1.when} — Restart which ${selectService} instance?: ${selectService}-2`),
    `the select card's record names the choice (${picked1.text})`,
  );
  const chosenCard = await waitCard(page);
  check(chosenCard.target.includes(`${selectService}-2`), `the confirm card names the chosen one (${chosenCard.target})`);
  await page.click(".confirm-card .approve");
  resumes.shift();
  await waitCompleted(page);
  log("flow 4: select card, chosen instance restarted");

  // 5. "scale <service>" with no count: a form from the schema; the browser's own min/max check,
  //    then the server's 422 (the max attribute taken away) next to the form, then a valid fill.
  await page.click("#new-conversation");
  await send(page, `scale ${scaleService}`);
  await page.waitForSelector(".input-card", { state: "visible", timeout: T });
  const field = "#q-field-replicas";
  const form = await page.$eval(".input-card", (c) => ({
    title: c.querySelector(".confirm-title").textContent,
    prompt: c.querySelector(".q-prompt").textContent,
    type: c.querySelector("#q-field-replicas").type,
    min: c.querySelector("#q-field-replicas").min,
    max: c.querySelector("#q-field-replicas").max,
    required: c.querySelector("#q-field-replicas").required,
    mark: c.querySelector(".q-field[data-field=replicas] .q-required")?.textContent,
    help: c.querySelector(".q-field[data-field=replicas] .q-help")?.textContent,
  }));
  check(
    form.title === `Scale ${scaleService}` &&
      /How many replicas/.test(form.prompt) &&
      form.type === "number" &&
      form.min === "0" &&
      form.max === "50" &&
      form.required &&
      form.mark?.trim() === "*" &&
      form.help === "the new replica count (0-50)",
    `form from the schema (${JSON.stringify(form)})`,
  );
  await page.fill(field, "99");
  await page.click(".input-card .q-submit");
  check(await page.$eval(field, (e) => e.validity.rangeOverflow), "the browser flags 99 > max");
  check(resumes.length === 0, "the browser's own check sent nothing");
  await page.$eval(field, (e) => e.removeAttribute("max"));
  await page.click(".input-card .q-submit");
  await page.waitForFunction(
    () => document.querySelector(".input-card .confirm-error")?.textContent,
    null,
    { timeout: T },
  );
  const error = await page.textContent(".input-card .confirm-error");
  check(error === "replicas: 99 is greater than the maximum of 50", `the server's 422 shown (${error})`);
  const bad = resumes.shift();
  check(bad?.decision === "respond" && bad.fill?.replicas === 99, `posted the fill (${JSON.stringify(bad)})`);
  check(await page.isVisible(".input-card"), "the form stays open");
  check((await page.getAttribute(field, "aria-invalid")) === "true", "the failing field is marked");
  check(!(await page.isDisabled(".input-card .q-submit")), "the form can be sent again");
  if (shots) await page.screenshot({ path: join(shots, "input-422.png") });
  await page.fill(field, "4");
  await page.click(".input-card .q-submit");
  await page.waitForSelector(".input-card", { state: "detached", timeout: T });
  const good = resumes.shift();
  check(JSON.stringify(good?.fill) === '{"replicas":4}', `posted the valid fill (${JSON.stringify(good)})`);
  await waitCard(page);
  const params = await page.textContent(".confirm-card .c-params");
  check(params.includes("replicas=4"), `the confirm card carries the answer (${params})`);
  await page.click(".confirm-card .approve");
  resumes.shift();
  await waitCompleted(page);
  log("flow 5: input form, server 422 shown, valid answer, scaled");

  // 6. The ledger agent: its write tool's progress bar in its step, then the runtime is killed
  //    inside the call and the runtime that takes over asks: outcome_unknown, answered abandon.
  await page.selectOption("#agent", "ledger");
  await page.click("#new-conversation");
  await send(page, "send_unkeyed to bob");
  await waitCard(page);
  await page.click(".confirm-card .approve");
  resumes.shift();
  const running = '.step[data-status="running"]';
  await page.waitForSelector(`${running} .progress`, { timeout: T });
  const bar = await page.$eval(running, (li) => ({
    tool: li.querySelector(".tool").textContent,
    width: li.querySelector(".progress-bar").style.width,
    text: li.querySelector(".progress-text").textContent,
    now: li.querySelector(".progress").getAttribute("aria-valuenow"),
  }));
  check(
    bar.tool === "send_unkeyed" && bar.width === "25%" && bar.text === "asking the ledger" && bar.now === "25",
    `progress bar in its step (${JSON.stringify(bar)})`,
  );
  console.log("KILL-NOW");
  check((await nextLine()) === "restarted", "the test restarted the runtime");
  await page.waitForSelector(".outcome-card", { state: "visible", timeout: 60_000 });
  const question = await page.textContent(".outcome-card .o-question");
  check(/^We don't know whether send_unkeyed( on .*)? happened\.$/.test(question), `outcome question (${question})`);
  const labels = await page.$$eval(".outcome-card .confirm-foot button", (els) => els.map((e) => e.textContent));
  check(labels.join("|") === "Abandon|Mark done|Retry", `three answers (${labels})`);
  await page.click(".outcome-card .abandon");
  await page.waitForSelector(".outcome-card", { state: "detached", timeout: T });
  const abandoned = resumes.shift();
  check(abandoned?.decision === "abandon", `abandon posted (${JSON.stringify(abandoned)})`);
  await page.waitForFunction(
    () => [...document.querySelectorAll(".resolved-note")].some((n) => /Abandoned/.test(n.textContent)),
    null,
    { timeout: T },
  );
  await waitCompleted(page);
  log("flow 6: progress bar, outcome_unknown card after a kill, abandoned");

  // 6b. A second message while the conversation's run waits for approval: the ledger agent
  //     enqueues it (concurrent_runs), and the page says the new run waits for the earlier one.
  await page.click("#new-conversation");
  await send(page, "send_keyed to carol");
  await waitCard(page);
  const pausedRun = new URLSearchParams(new URL(page.url()).hash.slice(1)).get("r");
  await send(page, "flaky 0");
  await page.waitForSelector('#run-status[data-status="waiting"]', { timeout: T });
  const waitingNote = await page.$$eval(".run .run-note", (els) => els.at(-1).textContent);
  check(
    waitingNote === `Waiting for the conversation's earlier run (${pausedRun}) to end.`,
    `the new run is shown waiting for the paused one (${waitingNote}, ${pausedRun})`,
  );
  log("flow 6b: a second message waits for the conversation's paused run");
  await checkNoTokenExposed(page, "after the flows");

  // 7. Sign out: the session ends (the cookie is gone); then sign in with a pasted token, which
  //    is traded for a session too and never stored.
  await page.click("#logout");
  await page.waitForSelector("#login", { state: "visible", timeout: T });
  const afterSignOut = await page.evaluate(async () => (await fetch("/v1/session")).status);
  check(afterSignOut === 401, `no session after sign-out (${afterSignOut})`);
  const res = await fetch(`${base}/v1/dev/token`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ user: "bob" }),
  });
  const { token } = await res.json();
  await page.click("#login-form summary");
  await page.fill("#login-token", token);
  await page.click("#login-form button[type=submit]");
  await page.waitForSelector("#shell", { state: "visible", timeout: T });
  check((await page.textContent("#me-name")) === "bob", "signed in as the pasted token's user");
  check((await page.inputValue("#login-token")) === "", "the pasted token is cleared from the form");
  await checkNoTokenExposed(page, "after a pasted token");
  await page.waitForSelector("#agent option", { state: "attached", timeout: T });
  check(authProblems.length === 0, `cookie session only, CSRF on writes: ${authProblems.join("; ")}`);
  check(violations.length === 0, `no CSP violation: ${violations.join("; ")}`);
  log("flow 7: sign-out ends the session; pasted token traded for a session; no CSP violation");
  console.log("UI-FLOW-OK");
} finally {
  stdin.close();
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
