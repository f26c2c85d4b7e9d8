// A single-page app on flask-authflow's headless API, as a "browser" client: the session
// cookie is HttpOnly (this script never sees it) and every request that changes something
// carries the session's CSRF token in X-CSRF-Token. The token comes from GET /session and
// is renewed after each completed sign-in step (the login rotates it).
"use strict";

const API = "/auth/api/v1";
let csrfToken = null;

function show(id, visible) {
  document.getElementById(id).hidden = !visible;
}

function say(text) {
  document.getElementById("status").textContent = text;
}

function fail(text) {
  const error = document.getElementById("error");
  error.textContent = text || "";
  error.hidden = !text;
}

async function call(method, path, body) {
  const headers = { "Authflow-Client": "browser", Accept: "application/json" };
  if (method !== "GET") headers["X-CSRF-Token"] = csrfToken || "";
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "same-origin",
  });
  const data = await response.json().catch(() => ({}));
  return { status: response.status, data };
}

// The session's state: who is signed in, what the login waits for, the CSRF token.
async function refresh() {
  const { data } = await call("GET", `${API}/session`);
  csrfToken = data.csrf_token;
  show("login-form", data.state === "guest");
  show("factor-form", data.state === "authenticating");
  show("signed-in", data.state === "authenticated");
  if (data.state === "authenticated") {
    document.getElementById("whoami").textContent = data.user.identifier;
    say("You are signed in.");
  } else if (data.state === "authenticating") {
    say(`Enter the code (${data.next_step.join(" or ")}).`);
  } else {
    say("Sign in with your username and password.");
  }
  return data;
}

async function afterStep(answer) {
  if (answer.status !== 200) {
    fail(answer.data.message || "The request was refused.");
  } else {
    fail("");
  }
  await refresh();
}

document.getElementById("login-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const answer = await call("POST", `${API}/login/password`, {
    username: document.getElementById("username").value,
    password: document.getElementById("password").value,
  });
  document.getElementById("password").value = "";
  await afterStep(answer);
});

document.getElementById("factor-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const answer = await call("POST", `${API}/login/factor`, {
    kind: "totp",
    code: document.getElementById("code").value,
  });
  document.getElementById("code").value = "";
  await afterStep(answer);
});

document.getElementById("notes-button").addEventListener("click", async () => {
  const answer = await call("GET", "/api/notes");
  const list = document.getElementById("notes");
  list.replaceChildren();
  if (answer.status !== 200) {
    fail("Sign in first.");
    await refresh();
    return;
  }
  for (const note of answer.data.notes) {
    const item = document.createElement("li");
    item.textContent = note;
    list.append(item);
  }
});

document.getElementById("logout-button").addEventListener("click", async () => {
  const answer = await call("POST", `${API}/logout`);
  document.getElementById("notes").replaceChildren();
  await afterStep(answer);
  if (answer.status === 200) say("You are signed out.");
});

refresh().catch(() => fail("The server could not be reached."));
