// Tiny DOM helpers: every text goes in as text (never as HTML), so ids, titles and chunk texts cannot inject markup.
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else if (name === "class") el.className = value;
    else if (value === true) el.setAttribute(name, "");
    else el.setAttribute(name, String(value));
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function clear(el) { el.replaceChildren(); return el; }

export function errorBox(error, retry) {
  return h("div", { class: "error", role: "alert" },
    h("strong", {}, error.code ? `${error.code}: ` : "Error: "), error.message || String(error),
    retry ? [" ", h("button", { type: "button", onclick: retry }, "Try again")] : null);
}

export function loading(text = "Loading…") { return h("p", { class: "muted", role: "status" }, text); }

export function empty(text) { return h("p", { class: "empty" }, text); }

export function badge(status) { return h("span", { class: `badge ${status}` }, status.replace("_", " ")); }

// Run `work` over `items` with at most `limit` in flight; results in the items' order.
export async function pool(items, limit, work) {
  const results = new Array(items.length);
  let next = 0;
  const runners = Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (next < items.length) {
      const i = next++;
      try { results[i] = { value: await work(items[i]) }; } catch (error) { results[i] = { error }; }
    }
  });
  await Promise.all(runners);
  return results;
}

export function confirmDialog(message, confirmLabel) {
  return new Promise((resolve) => {
    const dialog = h("dialog", { class: "confirm", "aria-label": "Confirm" },
      h("p", {}, message),
      h("div", { class: "actions" },
        h("button", { type: "button", class: "danger", onclick: () => dialog.close("yes") }, confirmLabel),
        h("button", { type: "button", onclick: () => dialog.close("no") }, "Cancel")));
    dialog.addEventListener("close", () => { dialog.remove(); resolve(dialog.returnValue === "yes"); });
    document.body.append(dialog);
    dialog.showModal();
  });
}

export function formatBytes(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

// The API names the field in its 422 message ("field: problem; other: problem"): each part goes to its field.
export function showFieldErrors(error, errors, inputs, formError) {
  if (error.status !== 422 && error.status !== 409) { formError.append(errorBox(error)); return; }
  let first = null;
  for (const part of error.message.split("; ")) {
    const name = Object.keys(errors).find((f) => part.startsWith(f + ":") || part.startsWith(f + ".")
                                             || part.startsWith(f + " "));
    if (name) {
      errors[name].textContent = errors[name].textContent ? `${errors[name].textContent}; ${part}` : part;
      first ??= name;
    } else {
      formError.append(errorBox({ code: error.code, message: part }));
    }
  }
  if (first) inputs[first][0].focus();
}
