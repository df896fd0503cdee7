// The decision record's pure part: what an interrupt was about, and the time it shows.
import assert from "node:assert/strict";
import { test } from "node:test";

import { clock, subjectOf } from "../../src/tether_gateway/static/card.js";

test("an action's record names its tool and target; a question's, its title", () => {
  const payload = { tool: "restart_instance", target: "payment-api-2", title: "Restart instance" };
  assert.equal(subjectOf({ kind: "confirm_action", payload }), "restart_instance payment-api-2");
  assert.equal(subjectOf({ kind: "outcome_unknown", payload: { tool: "send", target: "" } }), "send");
  assert.equal(subjectOf({ kind: "select_option", payload: { title: "Restart which?" } }), "Restart which?");
  assert.equal(subjectOf({ kind: "provide_input", payload: {} }), "More input needed");
  assert.equal(subjectOf({ kind: "confirm_action", payload: {} }), "confirm_action");
});

test("the time is hh:mm in 24 hours, local; nothing for a missing or bad timestamp", () => {
  const at = "2026-01-02T14:02:59.123456789Z";
  const local = new Date(at);
  const hhmm = `${String(local.getHours()).padStart(2, "0")}:${String(local.getMinutes()).padStart(2, "0")}`;
  assert.equal(clock(at), hhmm);
  assert.equal(clock(null), "");
  assert.equal(clock("not a time"), "");
});
