// The cards for a step's questions to a person: a select_option (one of the offered options) and
// a provide_input (a form generated from the interrupt's JSON schema). The pure part (schema ->
// field specs, form values -> fill) runs in node too; the server validates the answer again and
// its 422 message is shown next to the form.

/**
 * @typedef {{
 *   name: string, type: "string"|"integer"|"number"|"boolean"|"enum"|"json", label: string,
 *   description: string, required: boolean, choices: Array<string|number|boolean|null>,
 *   min?: number, max?: number, minLength?: number, maxLength?: number, pattern?: string,
 * }} FieldSpec
 */

/** One field per property of an object schema, in the schema's order. */
export function fieldSpecs(schema) {
  const props = (schema && typeof schema === "object" && schema.properties) || {};
  const required = new Set(Array.isArray(schema?.required) ? schema.required : []);
  return Object.entries(props).map(([name, prop]) => {
    const p = prop && typeof prop === "object" ? prop : {};
    const types = Array.isArray(p.type) ? p.type.filter((t) => t !== "null") : [p.type];
    let type = ["string", "integer", "number", "boolean"].includes(types[0]) ? types[0] : "json";
    if (Array.isArray(p.enum)) type = "enum";
    /** @type {FieldSpec} */
    const spec = {
      name,
      type,
      label: typeof p.title === "string" && p.title ? p.title : name,
      description: typeof p.description === "string" ? p.description : "",
      required: required.has(name),
      choices: Array.isArray(p.enum) ? p.enum : [],
    };
    const num = (v) => (typeof v === "number" && Number.isFinite(v) ? v : undefined);
    if (type === "integer" || type === "number") {
      spec.min = num(p.minimum);
      spec.max = num(p.maximum);
    }
    if (type === "string") {
      spec.minLength = num(p.minLength);
      spec.maxLength = num(p.maxLength);
      if (typeof p.pattern === "string") spec.pattern = p.pattern;
    }
    return spec;
  });
}

/**
 * The fill from the form's raw values ({name: string | boolean}): empty optional fields are left
 * out; numbers are sent as numbers and anything else as typed, for the server to judge.
 */
export function fillFrom(specs, raw) {
  const fill = {};
  for (const s of specs) {
    const v = raw[s.name];
    if (s.type === "boolean") {
      fill[s.name] = Boolean(v);
      continue;
    }
    if (v === undefined || v === "") continue;
    if (s.type === "integer" || s.type === "number") {
      const n = Number(v);
      fill[s.name] = String(v).trim() !== "" && Number.isFinite(n) ? n : v;
    } else if (s.type === "enum") {
      // An enum's choices may be numbers or booleans: send the choice itself, not its text.
      const hit = s.choices.find((c) => String(c) === v);
      fill[s.name] = hit === undefined ? v : hit;
    } else if (s.type === "json") {
      try {
        fill[s.name] = JSON.parse(v);
      } catch {
        fill[s.name] = v;
      }
    } else {
      fill[s.name] = v;
    }
  }
  return fill;
}

/** The field a server message such as "replicas: 99 is greater than the maximum of 50" names. */
export function fieldOfMessage(message, specs) {
  const head = String(message || "").split(":")[0].split(".")[0].trim();
  return specs.find((s) => s.name === head)?.name ?? null;
}

// ---- DOM ------------------------------------------------------------------------------------

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

/** The select_option card's body: a radio per option (label, description). */
export function renderOptions(container, options, onPick) {
  const group = el("div", "q-options");
  group.setAttribute("role", "radiogroup");
  options.forEach((o, i) => {
    const row = el("label", "q-option");
    const radio = el("input");
    radio.type = "radio";
    radio.name = "option";
    radio.value = o.value;
    radio.id = `q-option-${i}`;
    radio.addEventListener("change", () => onPick(o.value));
    const text = el("span", "q-option-text");
    text.append(el("span", "q-option-label", o.label || o.value));
    if (o.description) text.append(el("span", "q-option-desc muted", o.description));
    row.append(radio, text);
    group.append(row);
  });
  container.append(group);
}

/** The provide_input card's body: a field per property; returns a reader of the fill. */
export function renderForm(container, schema) {
  const specs = fieldSpecs(schema);
  const inputs = {};
  for (const s of specs) {
    const row = el("div", "q-field");
    row.dataset.field = s.name;
    const id = `q-field-${s.name}`;
    const label = el("label", "q-field-label", s.label);
    label.htmlFor = id;
    if (s.required) {
      const mark = el("span", "q-required", " *");
      mark.title = "required";
      label.append(mark);
    }
    let input;
    if (s.type === "enum") {
      input = el("select");
      if (!s.required) input.append(new Option("—", ""));
      for (const c of s.choices) input.append(new Option(String(c), String(c)));
    } else if (s.type === "json") {
      input = el("textarea");
      input.rows = 2;
      input.placeholder = "JSON";
    } else {
      input = el("input");
      input.type = { boolean: "checkbox", integer: "number", number: "number" }[s.type] || "text";
      if (s.type === "integer") input.step = "1";
      if (s.type === "number") input.step = "any";
      if (s.min !== undefined) input.min = String(s.min);
      if (s.max !== undefined) input.max = String(s.max);
      if (s.minLength !== undefined) input.minLength = s.minLength;
      if (s.maxLength !== undefined) input.maxLength = s.maxLength;
      if (s.pattern !== undefined) input.pattern = s.pattern;
    }
    input.id = id;
    input.name = s.name;
    if (s.required && s.type !== "boolean") input.required = true;
    const invalid = () => input.removeAttribute("aria-invalid");
    input.addEventListener("input", invalid);
    inputs[s.name] = input;
    row.append(label, input);
    if (s.description) {
      const help = el("span", "q-help muted", s.description);
      help.id = `${id}-help`;
      input.setAttribute("aria-describedby", help.id);
      row.append(help);
    }
    container.append(row);
  }
  return {
    specs,
    read() {
      const raw = {};
      for (const [name, input] of Object.entries(inputs)) {
        raw[name] = input.type === "checkbox" ? input.checked : input.value;
      }
      return fillFrom(specs, raw);
    },
    // Mark the field a server message names (the message itself is shown by the card).
    markInvalid(message) {
      for (const input of Object.values(inputs)) input.removeAttribute("aria-invalid");
      const name = fieldOfMessage(message, specs);
      if (name) {
        inputs[name].setAttribute("aria-invalid", "true");
        inputs[name].focus();
      }
    },
  };
}
