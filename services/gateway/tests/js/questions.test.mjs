// The question cards' pure part: the form fields a provide_input's JSON schema gives, the fill
// read back from them, and the field a server message names.
import assert from "node:assert/strict";
import { test } from "node:test";

import { fieldOfMessage, fieldSpecs, fillFrom } from "../../src/tether_gateway/static/questions.js";

const SCALE = {
  type: "object",
  properties: {
    replicas: { type: "integer", minimum: 0, maximum: 50, description: "the new replica count (0-50)" },
    reason: { type: "string", maxLength: 200, title: "Why" },
    env: { enum: ["prod", "staging"] },
    weight: { type: ["number", "null"], minimum: 0.5 },
    dryRun: { type: "boolean" },
    extra: { type: "object" },
  },
  required: ["replicas", "env"],
};

test("one field per property, in order, with its limits and marks", () => {
  const specs = fieldSpecs(SCALE);
  assert.deepEqual(
    specs.map((s) => [s.name, s.type, s.required]),
    [
      ["replicas", "integer", true],
      ["reason", "string", false],
      ["env", "enum", true],
      ["weight", "number", false],
      ["dryRun", "boolean", false],
      ["extra", "json", false],
    ],
  );
  const [replicas, reason, env, weight] = specs;
  assert.equal(replicas.min, 0);
  assert.equal(replicas.max, 50);
  assert.equal(replicas.description, "the new replica count (0-50)");
  assert.equal(reason.label, "Why");
  assert.equal(reason.maxLength, 200);
  assert.deepEqual(env.choices, ["prod", "staging"]);
  assert.equal(weight.min, 0.5);
});

test("a schema without properties gives no fields", () => {
  assert.deepEqual(fieldSpecs({ type: "object" }), []);
  assert.deepEqual(fieldSpecs(null), []);
});

test("the fill: numbers as numbers, empty optional fields left out, JSON parsed", () => {
  const specs = fieldSpecs(SCALE);
  const fill = fillFrom(specs, {
    replicas: "4",
    reason: "",
    env: "prod",
    weight: "",
    dryRun: true,
    extra: '{"a": 1}',
  });
  assert.deepEqual(fill, { replicas: 4, env: "prod", dryRun: true, extra: { a: 1 } });
  // What the browser let through unparsed goes as typed: the server's schema check answers.
  assert.deepEqual(fillFrom(specs, { replicas: "seven", dryRun: false }), { replicas: "seven", dryRun: false });
});

test("an enum of numbers sends the number", () => {
  const specs = fieldSpecs({ type: "object", properties: { size: { enum: [1, 2, 3] } } });
  assert.deepEqual(fillFrom(specs, { size: "2" }), { size: 2 });
});

test("the field a server message names", () => {
  const specs = fieldSpecs(SCALE);
  assert.equal(fieldOfMessage("replicas: 99 is greater than the maximum of 50", specs), "replicas");
  assert.equal(fieldOfMessage("the answer: 'replicas' is a required property", specs), null);
});
