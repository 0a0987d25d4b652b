// The console's shell: sign-in, navigation (hash routes: the location never holds the key) and the screens.
import { api, session } from "./api.js";
import { collectionsScreen, collectionScreen, newCollectionScreen } from "./collections.js";
import { clear, errorBox, h } from "./dom.js";
import { documentScreen } from "./documents.js";
import { jobsScreen } from "./jobs.js";
import { queryScreen } from "./query.js";
import { usageScreen } from "./usage.js";

const main = document.getElementById("main");
const nav = document.getElementById("nav");
const signout = document.getElementById("signout");
let current = null; // the running screen's AbortController: leaving a screen stops its polling

const routes = [
  [/^#\/collections\/?$/, () => collectionsScreen],
  [/^#\/new-collection$/, () => newCollectionScreen],
  [/^#\/collections\/([^/]+)\/documents\/([^/]+)$/, () => documentScreen],
  [/^#\/collections\/([^/]+)(?:\/(documents|settings|reindex))?$/, () => collectionScreen],
  [/^#\/query$/, () => queryScreen],
  [/^#\/jobs(?:\/([^/]+))?$/, () => jobsScreen],
  [/^#\/usage$/, () => usageScreen],
];

function render() {
  current?.abort();
  current = new AbortController();
  const signedIn = Boolean(session.key);
  nav.hidden = signout.hidden = !signedIn;
  clear(main);
  if (!signedIn) { main.append(signInForm()); return; }
  const hash = location.hash || "#/collections";
  const section = hash.startsWith("#/new-collection") ? "#/collections" : hash;
  for (const a of nav.querySelectorAll("a")) {
    if (section.startsWith(a.getAttribute("href"))) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  for (const [pattern, screen] of routes) {
    const match = hash.match(pattern);
    if (match) {
      const params = match.slice(1).map((p) => (p === undefined ? undefined : decodeURIComponent(p)));
      screen()(main, params, current.signal).catch((error) => {
        if (error.name !== "AbortError") main.append(errorBox(error));
      });
      return;
    }
  }
  main.append(errorBox({ code: "not_found", message: "no such page" }));
}

function signInForm() {
  const input = h("input", { id: "key", type: "password", name: "key", autocomplete: "off", required: true,
                             spellcheck: "false", "aria-describedby": "key-help" });
  const problem = h("p", { class: "field-error", id: "key-error", role: "alert" });
  const form = h("form", { class: "card narrow", "aria-labelledby": "signin-title" },
    h("h1", { id: "signin-title" }, "Sign in"),
    h("label", { for: "key" }, "API key"), input,
    h("p", { class: "muted", id: "key-help" },
      "An admin or reader key (a query key can use the query playground only). It is kept in this tab's ",
      "session storage and sent only to this kindex's /v1 API."),
    problem,
    h("button", { type: "submit", class: "primary" }, "Sign in"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    problem.textContent = "";
    session.key = input.value.trim();
    try {
      await api("GET", "/v1/collections?number=1", undefined, { signingIn: true });
      location.hash = location.hash || "#/collections";
    } catch (error) {
      if (error.status === 403) { location.hash = "#/query"; render(); return; } // a query key
      session.key = null;
      problem.textContent = error.status === 401 ? "This key is not valid." : error.message;
      input.focus();
      return;
    }
    render();
  });
  queueMicrotask(() => input.focus());
  return form;
}

signout.addEventListener("click", () => { session.key = null; location.hash = ""; render(); });
window.addEventListener("kindex:unauthorized", () => { session.key = null; render(); });
window.addEventListener("hashchange", () => { render(); main.focus({ preventScroll: true }); });
render();
