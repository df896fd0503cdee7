// The approvals inbox: every confirmation card the signed-in user may decide, live. One
// EventSource per page on GET /v1/approvals/events (cookie session); each `approvals` event is
// the whole inbox, so a reconnect (another gateway pod, a restart) redraws from the complete
// state and nothing is lost. Approve/Reject go through the client's resume (CSRF token, one
// idempotency key per answer); the next snapshot shows the outcome.
const $ = (sel, root = document) => root.querySelector(sel);

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

export class Approvals {
  constructor(client, { onError } = {}) {
    this.client = client;
    this.onError = onError;
    this.source = null;
    this.items = [];
    this.sent = new Map(); // interrupt id -> what this page said after sending its answer
  }

  start() {
    this.stop();
    this.source = new EventSource("/v1/approvals/events");
    this.source.addEventListener("approvals", (e) => this.render(JSON.parse(e.data).approvals));
    this.source.addEventListener("reauthenticate", () => {
      this.stop();
      this.onError?.({ status: 401 });
    });
  }

  stop() {
    this.source?.close();
    this.source = null;
  }

  show(visible) {
    $("#approvals").hidden = !visible;
    $("#chat").hidden = visible;
    $("#composer").hidden = visible;
    $("#open-approvals").classList.toggle("active", visible);
    if (visible) $("#conversation-title").textContent = "Approvals";
  }

  render(items) {
    this.items = items;
    const count = $("#approvals-count");
    count.textContent = items.length ? String(items.length) : "";
    count.hidden = !items.length;
    const list = $("#approvals-list");
    list.replaceChildren(...items.map((a) => this.card(a)));
    $("#approvals-empty").hidden = items.length > 0;
  }

  card(a) {
    const intr = a.interrupt;
    const p = intr.payload || {};
    const card = document.querySelector("#tpl-card").content.firstElementChild.cloneNode(true);
    card.classList.add("approval-card");
    card.dataset.interrupt = intr.id;
    card.dataset.run = a.runId;
    $(".confirm-title", card).textContent = p.title || "Confirmation required";
    const risk = $(".risk", card);
    risk.textContent = `${p.risk || "unknown"} risk`;
    risk.dataset.risk = p.risk || "";
    $(".c-tool", card).textContent = p.tool || intr.kind;
    $(".c-target", card).textContent = p.target || "—";
    $(".c-params", card).textContent = p.parameterSummary || "—";
    $(".c-reason", card).textContent = p.reason || "—";
    if (p.details) {
      $(".c-details", card).textContent = p.details;
      $(".c-details", card).hidden = false;
      $(".c-details-label", card).hidden = false;
    }
    const meta = el("p", "approval-meta muted");
    meta.append("Requested by ", el("span", "a-requester", a.requester), ` · ${a.agent}`);
    if (a.approvalsRequired > 1) {
      const by = a.approvedBy.length ? ` (${a.approvedBy.join(", ")})` : "";
      meta.append(el("span", "a-count", ` · ${a.approvedBy.length} of ${a.approvalsRequired} approvals${by}`));
    }
    const steps = el("ol", "approval-steps");
    for (const s of a.steps) steps.append(el("li", `a-step a-${s.status}`, `${s.tool} · ${s.status}`));
    card.insertBefore(steps, $(".confirm-foot", card));
    card.insertBefore(meta, steps);
    const expires = new Date(intr.expiresAt);
    $(".expiry", card).textContent = Number.isNaN(expires.getTime()) ? "" : `Expires at ${expires.toLocaleTimeString()}`;
    const error = $(".confirm-error", card);
    const buttons = [$(".approve", card), $(".reject", card)];
    const sent = this.sent.get(intr.id);
    if (sent) error.textContent = sent;
    const decide = async (decision) => {
      for (const b of buttons) b.disabled = true;
      error.textContent = "";
      try {
        await this.client.resume(a.runId, intr.id, decision);
        const note = decision === "approve" ? "Approved." : "Rejected.";
        this.sent.set(intr.id, note);
        error.textContent = note;
      } catch (err) {
        error.textContent = err.message || String(err);
        for (const b of buttons) b.disabled = false;
      }
    };
    buttons[0].addEventListener("click", () => decide("approve"));
    buttons[1].addEventListener("click", () => decide("reject"));
    return card;
  }
}
