// Collections: the list, create and edit (every field, the API's messages at the field), delete, status counts.
import { api, enc } from "./api.js";
import { append, badge, clear, confirmDialog, empty, errorBox, h, loading, pool, showFieldErrors } from "./dom.js";
import { documentsPanel } from "./documents.js";
import { reindexPanel } from "./jobs.js";

const PAGE = 50;

export async function collectionsScreen(main, _params, signal) {
  const body = h("div", {});
  main.append(h("div", { class: "title-row" }, h("h1", {}, "Collections"),
    h("a", { class: "button primary", href: "#/new-collection" }, "New collection")), body);
  let cursor = null;
  const table = h("tbody", {});
  const more = h("button", { type: "button", hidden: true }, "Load more");
  async function load() {
    more.disabled = true;
    const status = loading();
    body.append(status);
    try {
      const page = await api("GET", `/v1/collections?number=${PAGE}${cursor ? "&cursor=" + enc(cursor) : ""}`,
                             undefined, { signal });
      status.remove();
      if (!cursor && page.collections.length === 0) {
        body.append(empty("No collections yet. Create one to upload documents."));
        return;
      }
      if (!table.isConnected) {
        body.append(h("div", { class: "table-wrap" }, h("table", {},
          h("thead", {}, h("tr", {}, ["Collection", "Title", "Documents", "Embedding model", "Config"].map(
            (t) => h("th", { scope: "col" }, t)))), table)), more);
      }
      const details = await pool(page.collections, 6, (id) => api("GET", `/v1/collections/${enc(id)}`,
                                                                    undefined, { signal }));
      page.collections.forEach((id, i) => {
        const c = details[i].value;
        table.append(h("tr", {},
          h("th", { scope: "row" }, h("a", { href: `#/collections/${enc(id)}` }, id)),
          h("td", {}, c?.title || ""), h("td", { class: "num" }, c ? String(c.document_count) : "?"),
          h("td", {}, c?.active_embedding_model || c?.embedding_model || ""),
          h("td", { class: "num" }, c ? `v${c.config_version}` : "")));
      });
      cursor = page.next_cursor;
      more.hidden = !cursor;
      more.disabled = false;
    } catch (error) {
      status.remove();
      if (error.name !== "AbortError") body.append(errorBox(error, () => { body.lastChild.remove(); load(); }));
    }
  }
  more.addEventListener("click", load);
  await load();
}

export async function newCollectionScreen(main) {
  main.append(h("p", {}, h("a", { href: "#/collections" }, "← Collections")), h("h1", {}, "New collection"),
    collectionForm(null, (saved) => { location.hash = `#/collections/${enc(saved.id)}`; }));
}

export async function collectionScreen(main, [id, tab = "documents"], signal) {
  main.append(h("p", {}, h("a", { href: "#/collections" }, "← Collections")));
  const status = loading();
  main.append(status);
  let collection;
  try {
    collection = await api("GET", `/v1/collections/${enc(id)}`, undefined, { signal });
  } catch (error) {
    status.remove();
    main.append(errorBox(error));
    return;
  }
  status.remove();
  const tabs = [["documents", "Documents"], ["settings", "Settings"], ["reindex", "Reindex"]];
  const panel = h("section", { class: "panel" });
  const counts = statusCounts(id, signal);
  counts.box.append(`${collection.document_count} documents`);
  main.append(
    h("div", { class: "title-row" }, h("h1", {}, collection.title || collection.id, " ",
      h("small", { class: "muted" }, collection.id)),
      h("button", { type: "button", class: "danger", onclick: () => deleteCollection(collection) },
        "Delete collection")),
    counts.box,
    h("nav", { class: "tabs", "aria-label": "Collection" }, tabs.map(([key, label]) =>
      h("a", { href: `#/collections/${enc(id)}/${key}`, "aria-current": key === tab ? "page" : null }, label))),
    panel);
  if (tab === "settings") {
    counts.refresh();
    panel.append(collectionForm(collection, () => { location.hash = `#/collections/${enc(id)}/documents`; }));
  } else if (tab === "reindex") {
    counts.refresh();
    await reindexPanel(panel, collection, signal);
  } else {
    await documentsPanel(panel, collection, signal, counts.refresh);
  }
}

async function deleteCollection(collection) {
  if (!(await confirmDialog(`Delete collection "${collection.id}" and all its ${collection.document_count} ` +
                            "documents? This cannot be undone.", "Delete collection"))) return;
  try {
    await api("DELETE", `/v1/collections/${enc(collection.id)}`);
    location.hash = "#/collections";
  } catch (error) {
    document.getElementById("main").prepend(errorBox(error));
  }
}

// Documents by status, from the list's summaries (a request per 1,000 documents, at most COUNT_LIMIT documents).
// Recounted whenever the documents list is shown again (after uploads, deletes, a refresh).
const COUNT_LIMIT = 5000;

function statusCounts(id, signal) {
  const box = h("p", { class: "counts", "aria-live": "polite" });
  let generation = 0;
  async function count() {
    const mine = ++generation;
    const collection = await api("GET", `/v1/collections/${enc(id)}`, undefined, { signal });
    const counts = {};
    let counted = 0;
    let cursor = null;
    do {
      const page = await api("GET", `/v1/collections/${enc(id)}/documents?number=1000${
        cursor ? "&cursor=" + enc(cursor) : ""}`, undefined, { signal });
      for (const doc of page.items) counts[doc.status] = (counts[doc.status] || 0) + 1;
      counted += page.items.length;
      cursor = page.next_cursor;
    } while (cursor && counted < COUNT_LIMIT);
    if (mine !== generation) return;
    append(clear(box), [`${collection.document_count} documents`, cursor ? ` (first ${counted} counted)` : "",
      Object.keys(counts).length ? ": " : "",
      Object.entries(counts).map(([s, n]) => h("span", { class: "count" }, badge(s), ` ${n}`))]);
  }
  return { box, refresh: () => count().catch(() => {}) };
}

// Every field of CollectionInput. Lists are edited as comma-separated text; the configuration as JSON.
const FIELDS = [
  ["id", "Id", "text", "1-255 characters, no '/'; cannot change later"],
  ["title", "Title", "text", ""],
  ["embedding_model", "Embedding model", "text", "local:all-MiniLM-L6-v2, hash:<dims> or openai:<model>"],
  ["chunking_method", "Chunking method", "select:maxChars,tokens", ""],
  ["chunking_max_size", "Chunk size", "number", "characters (maxChars, at most 100,000) or tokens (at most 8,192)"],
  ["chunking_overlap_offset", "Chunk overlap", "number", "same unit as the size"],
  ["document_spaces", "Document spaces", "list", "comma-separated"],
  ["allow_guests", "Allow guests", "checkbox", "queries without a user may read this collection"],
  ["query_groups", "Query groups", "list", "comma-separated groups whose users may query"],
  ["document_access", "Document access", "select:optional,required",
   "a document without an access list: optional - visible to whoever may query; required - visible to nobody"],
  ["ocr", "OCR of scanned PDF pages", "select:auto,off",
   "auto: read pages without a text layer by OCR; off: leave them empty (named in the document's failure reason)"],
  ["rights_check_method", "Rights check", "select:public,external", "external: a signed POST per query"],
  ["rights_check_method_configuration", "Rights check configuration", "json",
   'JSON, e.g. {"url": "https://rights.example/check", "timeout": 2}'],
];

export function collectionForm(collection, onSaved) {
  const inputs = {};
  const errors = {};
  const formError = h("div", { role: "alert" });
  const form = h("form", { class: "card form", novalidate: true });
  for (const [name, label, kind, help] of FIELDS) {
    if (name === "id" && collection) continue;
    const id = `f-${name}`;
    const value = collection ? collection[name] : undefined;
    let input;
    if (kind.startsWith("select:")) {
      input = h("select", { id, name }, kind.slice(7).split(",").map((o) =>
        h("option", { value: o, selected: (value ?? kind.slice(7).split(",")[0]) === o }, o)));
    } else if (kind === "checkbox") {
      input = h("input", { id, name, type: "checkbox", checked: Boolean(value) });
    } else if (kind === "json") {
      input = h("textarea", { id, name, rows: 3, spellcheck: "false" },
        value && Object.keys(value).length ? JSON.stringify(value, null, 2) : "");
    } else {
      input = h("input", { id, name, type: kind === "number" ? "number" : "text", autocomplete: "off",
        value: Array.isArray(value) ? value.join(", ") : value ?? "", required: name === "id" });
    }
    errors[name] = h("p", { class: "field-error", id: `${id}-error`, "aria-live": "polite" });
    input.setAttribute("aria-describedby", `${id}-help ${id}-error`);
    inputs[name] = [input, kind];
    form.append(h("div", { class: `field ${kind === "checkbox" ? "check" : ""}` },
      h("label", { for: id }, label), input, h("p", { class: "help", id: `${id}-help` }, help), errors[name]));
  }
  const save = h("button", { type: "submit", class: "primary" }, collection ? "Save changes" : "Create collection");
  form.append(formError, h("div", { class: "actions" }, save));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    for (const p of Object.values(errors)) p.textContent = "";
    clear(formError);
    const body = {};
    try {
      for (const [name, [input, kind]] of Object.entries(inputs)) {
        const changed = readField(input, kind, collection?.[name]);
        if (changed !== undefined) body[name] = changed.value;
      }
    } catch (error) {
      errors[error.field].textContent = error.message;
      inputs[error.field][0].focus();
      return;
    }
    const id = collection ? collection.id : inputs.id[0].value.trim();
    if (!id) { errors.id.textContent = "id: required"; inputs.id[0].focus(); return; }
    delete body.id;
    save.disabled = true;
    try {
      onSaved(await api("PUT", `/v1/collections/${enc(id)}`, body));
    } catch (error) {
      showFieldErrors(error, errors, inputs, formError);
    } finally {
      save.disabled = false;
    }
  });
  return form;
}

// Only what differs from the stored collection is sent (PUT is a partial update); on create, what was filled in.
function readField(input, kind, stored) {
  const raw = kind === "checkbox" ? input.checked : input.value;
  let value;
  if (kind === "checkbox") value = raw;
  else if (kind === "number") value = raw === "" ? undefined : Number(raw);
  else if (kind === "list") value = raw.split(",").map((s) => s.trim()).filter(Boolean);
  else if (kind === "json") {
    try { value = raw.trim() ? JSON.parse(raw) : {}; } catch (e) {
      throw Object.assign(new Error(`${input.name}: not valid JSON (${e.message})`), { field: input.name });
    }
  } else value = raw.trim();
  if (value === undefined) return undefined;
  if (stored === undefined) {
    const emptyValue = value === "" || value === false || (Array.isArray(value) && !value.length)
      || (kind === "json" && !Object.keys(value).length);
    return emptyValue ? undefined : { value };
  }
  return JSON.stringify(value) === JSON.stringify(stored) ? undefined : { value };
}
