// Runs the ready views' WebAuthn script (authflow/webauthn_script.html) in Node with a
// stand-in browser: the page's elements, fetch answers and an authenticator are given as
// JSON on stdin; what the script did (requests, the options the authenticator saw, the
// form it submitted, where it navigated, the status text) is printed as JSON.
//
// Input: {"script": "...", "elements": [{"id", "tag", "attrs": {...}, "action", "fields":
// {name: value}}], "start": "<id of the data-webauthn element>", "responses": {url:
// [status, body]}, "authenticator": {"rawId", "clientDataJSON", ...} (base64url strings)}
"use strict";

const vm = require("vm");

function fromB64url(text) {
  return Buffer.from(String(text), "base64url");
}

function toArrayBuffer(text) {
  const bytes = fromB64url(text);
  return bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length);
}

function b64urlOf(value) {
  if (value instanceof ArrayBuffer) {
    return { arrayBuffer: Buffer.from(new Uint8Array(value)).toString("base64url") };
  }
  if (Array.isArray(value)) {
    return value.map(b64urlOf);
  }
  if (value && typeof value === "object") {
    const out = {};
    for (const [key, item] of Object.entries(value)) {
      out[key] = b64urlOf(item);
    }
    return out;
  }
  return value;
}

function main(input) {
  const report = { fetches: [], options: null, submitted: null, location: null, status: {}, errors: [] };
  const elements = new Map();

  for (const spec of input.elements) {
    const fields = {};
    for (const [name, value] of Object.entries(spec.fields || {})) {
      fields[name] = { value };
    }
    const handlers = {};
    const element = {
      id: spec.id,
      tagName: spec.tag.toUpperCase(),
      // As in a browser: a control named "action" shadows the form's action property
      // (the script must read the attribute instead).
      action: "action" in fields ? fields.action : spec.action,
      disabled: Boolean(spec.attrs && "disabled" in spec.attrs),
      textContent: "",
      fields,
      elements: {
        namedItem(name) {
          if (!(name in fields)) {
            throw new Error(`form ${spec.id} has no field ${name}`);
          }
          return fields[name];
        },
      },
      getAttribute(name) {
        if (name === "action" && spec.action !== undefined) {
          return spec.action;
        }
        return spec.attrs && name in spec.attrs ? spec.attrs[name] : null;
      },
      addEventListener(type, handler) {
        handlers[type] = handler;
      },
      querySelector(selector) {
        if (selector !== "button[type=submit]") {
          throw new Error(`unexpected selector ${selector}`);
        }
        return elements.get(spec.submit) || null;
      },
      submit() {
        const values = {};
        for (const [name, field] of Object.entries(fields)) {
          values[name] = field.value;
        }
        report.submitted = { form: spec.id, action: spec.action, fields: values };
      },
      handlers,
    };
    elements.set(spec.id, element);
  }

  class FormDataStub {
    constructor(form) {
      this.entries = Object.entries(form.fields).map(([name, field]) => [name, field.value]);
    }
    forEach(callback) {
      for (const [name, value] of this.entries) {
        callback(value, name);
      }
    }
  }

  const authenticator = input.authenticator || {};

  function credential(kind) {
    const response = { clientDataJSON: toArrayBuffer(authenticator.clientDataJSON) };
    if (kind === "get") {
      response.authenticatorData = toArrayBuffer(authenticator.authenticatorData);
      response.signature = toArrayBuffer(authenticator.signature);
      response.userHandle = authenticator.userHandle ? toArrayBuffer(authenticator.userHandle) : null;
    } else {
      response.attestationObject = toArrayBuffer(authenticator.attestationObject);
      response.getTransports = () => ["usb", "nfc"];
    }
    return {
      id: authenticator.rawId,
      rawId: toArrayBuffer(authenticator.rawId),
      type: "public-key",
      response,
      authenticatorAttachment: "cross-platform",
      getClientExtensionResults: () => ({ credProps: { rk: true } }),
    };
  }

  const context = {
    console,
    atob,
    btoa,
    URLSearchParams,
    FormData: FormDataStub,
    Uint8Array,
    Object,
    JSON,
    String,
    Error,
    Promise,
    document: {
      getElementById: (id) => elements.get(id) || null,
      querySelectorAll: (selector) => {
        if (selector !== "[data-webauthn]") {
          throw new Error(`unexpected selector ${selector}`);
        }
        return [...elements.values()].filter((e) => e.getAttribute("data-webauthn") !== null);
      },
    },
    navigator: {
      credentials: {
        get: async ({ publicKey }) => {
          report.options = { get: b64urlOf(publicKey) };
          return credential("get");
        },
        create: async ({ publicKey }) => {
          report.options = { create: b64urlOf(publicKey) };
          return credential("create");
        },
      },
    },
  };
  context.window = context;
  context.PublicKeyCredential = function PublicKeyCredential() {};
  context.location = { assign: (url) => { report.location = url; } };
  context.alert = (text) => { report.errors.push(text); };
  context.fetch = async (url, init) => {
    const body = {};
    init.body.forEach((value, name) => { body[name] = value; });
    report.fetches.push({ url, method: init.method, credentials: init.credentials, body,
                          accept: init.headers && init.headers.Accept });
    const [status, answer] = input.responses[url] || [404, { error: "not_found", message: "no answer" }];
    return {
      ok: status >= 200 && status < 300,
      status,
      json: async () => answer,
    };
  };

  vm.createContext(context);
  vm.runInContext(input.script, context);

  const start = elements.get(input.start);
  report.enabled = !(start.tagName === "FORM" ? start.querySelector("button[type=submit]") : start).disabled;
  if (start.tagName === "FORM") {
    start.handlers.submit({ preventDefault() {} });
  } else {
    start.handlers.click({});
  }
  setTimeout(() => {
    for (const [id, element] of elements) {
      if (element.textContent) {
        report.status[id] = element.textContent;
      }
    }
    process.stdout.write(JSON.stringify(report));
  }, 50);
}

let data = "";
process.stdin.on("data", (chunk) => { data += chunk; });
process.stdin.on("end", () => main(JSON.parse(data)));
