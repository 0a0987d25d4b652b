// Documents of a collection: paged list with a status filter, drag-and-drop upload by presigned URL with progress,
// delete, retry of failed documents (a reindex job), and one document's view: its facts, its attributes and access
// list (shown and edited), and its chunks.
import { api, enc, putFile } from "./api.js";
import { badge, clear, confirmDialog, empty, errorBox, formatBytes, h, loading, showFieldErrors } from "./dom.js";
import { startReindex } from "./jobs.js";

const PAGE = 20;
const STATUSES = ["pending", "in_progress", "indexed", "failed"];
const POLL_MS = 1000;

const docPath = (c, d) => `/v1/collections/${enc(c)}/documents/${enc(d)}`;

export async function documentsPanel(panel, collection, signal, listed = () => {}) {
  const c = collection.id;
  const notice = h("div", { "aria-live": "polite" });
  const filter = h("select", { id: "status-filter" }, h("option", { value: "" }, "all"),
    STATUSES.map((s) => h("option", { value: s }, s.replace("_", " "))));
  const listBox = h("div", {});
  const prev = h("button", { type: "button", disabled: true }, "← Previous");
  const next = h("button", { type: "button", disabled: true }, "Next →");
  const pageInfo = h("span", { class: "muted" });
  panel.append(uploader(c, signal, () => show(starts.at(-1))), notice,
    h("div", { class: "toolbar" }, h("label", { for: "status-filter" }, "Status"), filter,
      h("button", { type: "button", onclick: () => show(starts.at(-1)) }, "Refresh")),
    listBox, h("div", { class: "pager" }, prev, pageInfo, next));

  // Pages start at a cursor (null: the first). With a filter, a page is the next PAGE matching documents.
  let starts = [null];
  let following = null;
  async function show(start) {
    clear(listBox).append(loading());
    prev.disabled = next.disabled = true;
    try {
      const { rows, cursor } = await collect(c, start, filter.value, signal);
      following = cursor;
      clear(listBox).append(rows.length ? table(c, rows, signal, notice, () => show(starts.at(-1)))
        : empty(!filter.value ? "No documents yet. Drop files above to upload them."
          : cursor ? `No ${filter.value.replace("_", " ")} documents among the ${SCAN_LIMIT} read; Next reads on.`
            : `No ${filter.value.replace("_", " ")} documents${start ? " after this point" : ""}.`));
      prev.disabled = starts.length < 2;
      next.disabled = !following;
      pageInfo.textContent = `page ${starts.length}`;
      listed();
    } catch (error) {
      if (error.name !== "AbortError") clear(listBox).append(errorBox(error, () => show(start)));
    }
  }
  next.addEventListener("click", () => { starts.push(following); show(following); });
  prev.addEventListener("click", () => { starts.pop(); show(starts.at(-1)); });
  filter.addEventListener("change", () => { starts = [null]; show(null); });
  await show(null);
}

// Each page of the list carries every document's summary (status, chunks, size, failure): no read per document.
// There is no status filter on the server, so a filtered page reads the list on until at least PAGE documents
// match, at most SCAN_LIMIT documents (Next goes on from there): a rare status never reads a whole collection.
const SCAN_LIMIT = 2500;
const SCAN_PAGE = 250;

async function collect(c, start, status, signal) {
  const rows = [];
  let cursor = start;
  let first = true;
  let scanned = 0;
  while (rows.length < PAGE && (first || cursor) && scanned < SCAN_LIMIT) {
    first = false;
    const page = await api("GET", `/v1/collections/${enc(c)}/documents?number=${status ? SCAN_PAGE : PAGE}${
      cursor ? "&cursor=" + enc(cursor) : ""}`, undefined, { signal });
    scanned += page.items.length;
    rows.push(...page.items.filter((doc) => !status || doc.status === status));
    cursor = page.next_cursor;
    if (!status) break;
  }
  return { rows, cursor };
}

// "region=eu · year=2024 · tags=[hr, policy]": what a filter sees, at a glance.
export function attributesLine(attributes) {
  const entries = Object.entries(attributes || {});
  if (!entries.length) return null;
  return h("div", { class: "muted attributes" }, entries.map(([k, v]) =>
    `${k}=${Array.isArray(v) ? `[${v.join(", ")}]` : typeof v === "string" ? v : JSON.stringify(v)}`).join(" · "));
}

function table(c, rows, signal, notice, refresh) {
  return h("div", { class: "table-wrap" }, h("table", { class: "documents" },
    h("thead", {}, h("tr", {}, ["Document", "Status", "Chunks", "Size", "Failure", "Actions"].map(
      (t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, rows.map((d) => h("tr", { "data-document": d.id },
      h("th", { scope: "row" }, h("a", { href: `#/collections/${enc(c)}/documents/${enc(d.id)}` }, d.id),
        d.title && d.title !== d.id ? h("div", { class: "muted" }, d.title) : null,
        attributesLine(d.attributes), d.access ? h("div", { class: "muted access-mark" }, "access list") : null),
      h("td", {}, badge(d.status)),
      h("td", { class: "num", "data-label": "chunks" }, d.status === "in_progress" ? `${d.chunks_done}/${d.chunk_count}`
        : String(d.chunk_count ?? "")),
      h("td", { class: "num", "data-label": "size" }, d.content_length ? formatBytes(d.content_length) : ""),
      h("td", { class: "failure" }, d.failure_reason || ""),
      h("td", { class: "row-actions" },
        h("a", { class: "button", href: `#/collections/${enc(c)}/documents/${enc(d.id)}` }, "Chunks"),
        d.status === "failed" ? h("button", { type: "button", onclick: () => retry(c, notice) }, "Retry") : null,
        h("button", { type: "button", class: "danger", "aria-label": `Delete ${d.id}`,
                      onclick: () => remove(c, d.id, notice, refresh) }, "Delete")))))));
}

async function remove(c, d, notice, done) {
  if (!(await confirmDialog(`Delete document "${d}" with its chunks and file?`, "Delete document"))) return;
  try {
    await api("DELETE", docPath(c, d));
    clear(notice).append(h("p", { class: "ok" }, `Deleted ${d}.`));
    done();
  } catch (error) {
    clear(notice).append(errorBox(error));
  }
}

// A failed document is retried by the collection's reindex pass (it re-processes retryable failures). A document
// that failed for good (an unsupported file, say) needs a new upload under the same id.
export async function retry(c, notice) {
  try {
    const job = await startReindex(c, false);
    clear(notice).append(h("p", { class: "ok" }, "Reindex job started: it retries the failed documents whose ",
      "failure is retryable (upload a document that failed for good again). ",
      h("a", { href: `#/jobs/${enc(job.id)}` }, "Watch the job")));
  } catch (error) {
    clear(notice).append(errorBox(error));
  }
}

// Drop zone and file picker: each file becomes the document named after it (an existing one is replaced).
function uploader(c, signal, changed) {
  const picker = h("input", { type: "file", id: "files", multiple: true, class: "visually-hidden" });
  const list = h("ul", { class: "uploads", "aria-live": "polite" });
  const zone = h("div", { class: "drop", tabindex: "0", role: "button", "aria-describedby": "drop-help" },
    h("strong", {}, "Drop files here"), " or ", h("label", { for: "files", class: "link" }, "choose files"),
    h("p", { class: "muted", id: "drop-help" }, "txt, md, html, pdf, docx; each file becomes the document ",
      "named after it (an existing one is replaced)."));
  const start = (files) => {
    const uploads = [...files].map((file) => uploadOne(c, file, list, signal));
    Promise.allSettled(uploads).then(changed);
  };
  zone.addEventListener("dragover", (e) => { e.preventDefault(); zone.classList.add("over"); });
  zone.addEventListener("dragleave", () => zone.classList.remove("over"));
  zone.addEventListener("drop", (e) => { e.preventDefault(); zone.classList.remove("over"); start(e.dataTransfer.files); });
  zone.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); picker.click(); } });
  picker.addEventListener("change", () => { start(picker.files); picker.value = ""; });
  return h("section", { class: "upload", "aria-label": "Upload" }, zone, picker, list);
}

async function uploadOne(c, file, list, signal) {
  const bar = h("progress", { max: 1, value: 0, "aria-label": `Upload of ${file.name}` });
  const state = h("span", { class: "state" }, "asking for an upload URL…");
  list.append(h("li", { "data-file": file.name }, h("span", { class: "name" }, file.name), " ",
    h("span", { class: "muted" }, formatBytes(file.size)), bar, state));
  try {
    const grant = await api("POST", `${docPath(c, file.name)}/upload`,
      { filename: file.name, size: file.size, ...(file.type ? { mimetype: file.type } : {}) }, { signal });
    state.textContent = "uploading…";
    await putFile(grant.url, grant.method, grant.headers, file, (p) => { bar.value = p; });
    bar.value = 1;
    state.textContent = "uploaded, indexing…";
    for (;;) {
      await new Promise((r) => setTimeout(r, POLL_MS));
      if (signal.aborted) return;
      const doc = await api("GET", docPath(c, file.name), undefined, { signal });
      if (doc.status === "indexed") { clear(state).append(badge("indexed"), ` ${doc.chunk_count} chunks`); return; }
      if (doc.status === "failed") { clear(state).append(badge("failed"), ` ${doc.failure_reason ?? ""}`); return; }
      state.textContent = doc.status === "in_progress" ? `indexing ${doc.chunks_done}/${doc.chunk_count}…`
        : "queued…";
    }
  } catch (error) {
    if (error.name !== "AbortError") clear(state).append(errorBox(error));
    throw error;
  }
}

export async function documentScreen(main, [c, d], signal) {
  main.append(h("p", {}, h("a", { href: `#/collections/${enc(c)}` }, `← ${c}`)));
  const status = loading();
  main.append(status);
  let doc;
  try {
    doc = await api("GET", docPath(c, d), undefined, { signal });
  } catch (error) {
    status.remove();
    main.append(errorBox(error));
    return;
  }
  status.remove();
  const notice = h("div", { "aria-live": "polite" });
  const facts = [["Status", badge(doc.status)], ["Title", doc.title], ["Type", doc.mimetype],
    ["Size", doc.content_length ? formatBytes(doc.content_length) : ""], ["Chunks", String(doc.chunk_count)],
    ["Version", `${doc.version} (indexed ${doc.indexed_version})`], ["Indexed at", doc.indexed_at ?? ""],
    ["Model", doc.indexed_model ?? ""], ["URL", doc.url], ["Failure", doc.failure_reason ?? ""]];
  main.append(h("div", { class: "title-row" }, h("h1", {}, d),
    h("div", { class: "actions" },
      doc.status === "failed" ? h("button", { type: "button", onclick: () => retry(c, notice) }, "Retry") : null,
      h("button", { type: "button", class: "danger", onclick: async () => {
        if (!(await confirmDialog(`Delete document "${d}" with its chunks and file?`, "Delete document"))) return;
        try { await api("DELETE", docPath(c, d)); location.hash = `#/collections/${enc(c)}`; } catch (error) {
          clear(notice).append(errorBox(error));
        }
      } }, "Delete"))),
  notice,
  h("dl", { class: "facts" }, facts.filter(([, v]) => v).map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
  metadataForm(c, d, doc, notice),
  h("h2", {}, "Chunks"));
  const chunks = h("ol", { class: "chunks" });
  const more = h("button", { type: "button", hidden: true }, "Load more chunks");
  main.append(chunks, more);
  let cursor = null;
  async function load() {
    more.disabled = true;
    const wait = loading();
    main.insertBefore(wait, more);
    try {
      const page = await api("GET", `${docPath(c, d)}/chunks?number=${PAGE}${cursor ? "&cursor=" + enc(cursor) : ""}`,
                             undefined, { signal });
      if (!cursor && !page.chunks.length) chunks.replaceWith(empty(doc.status === "indexed" ? "No chunks."
        : `No chunks yet (the document is ${doc.status.replace("_", " ")}).`));
      for (const k of page.chunks) {
        const pages = k.page_start == null ? null
          : k.page_end && k.page_end !== k.page_start ? `pages ${k.page_start}–${k.page_end}` : `page ${k.page_start}`;
        chunks.append(h("li", { class: "chunk", value: k.index + 1 },
          h("div", { class: "meta" }, h("strong", {}, `#${k.index}`), ` chars ${k.start}–${k.end}`,
            pages ? ` · ${pages}` : "", h("code", { class: "muted" }, ` ${k.chunk_id}`)),
          h("pre", {}, k.text)));
      }
      cursor = page.next_cursor;
      more.hidden = !cursor;
    } catch (error) {
      if (error.name !== "AbortError") main.insertBefore(errorBox(error), more);
    } finally {
      wait.remove();
      more.disabled = false;
    }
  }
  more.addEventListener("click", load);
  await load();
}

// The document's attributes (JSON: the types matter to filters, 2024 is not "2024") and its access list (four
// comma-separated lists). Only what changed is sent: a PUT of these alone re-embeds nothing, the document shows
// "in progress" until the index has them. The API's 422 message goes to the field it names.
const ACCESS = [["users", "Users who may see it"], ["groups", "Groups whose users may see it"],
  ["deny_users", "Users denied (deny wins)"], ["deny_groups", "Groups denied (deny wins)"]];
const listOf = (text) => text.split(",").map((s) => s.trim()).filter(Boolean);

function metadataForm(c, d, doc, notice) {
  let stored = { attributes: doc.attributes ?? {}, access: doc.access ?? null };
  const attributes = h("textarea", { id: "d-attributes", name: "attributes", rows: 4, spellcheck: "false",
    "aria-describedby": "d-attributes-help d-attributes-error",
    placeholder: '{"region": "eu", "year": 2024, "tags": ["hr"]}' });
  const access = Object.fromEntries(ACCESS.map(([name]) => [name, h("input", { id: `d-access-${name}`,
    name: `access.${name}`, autocomplete: "off", "aria-describedby": "d-access-help d-access-error" })]));
  const errors = { attributes: h("p", { class: "field-error", id: "d-attributes-error", "aria-live": "polite" }),
    access: h("p", { class: "field-error", id: "d-access-error", "aria-live": "polite" }) };
  const inputs = { attributes: [attributes], access: [access.users] };
  const formError = h("div", { role: "alert" });
  const accessState = h("p", { class: "help", id: "d-access-help" });
  const fill = () => {
    attributes.value = Object.keys(stored.attributes).length ? JSON.stringify(stored.attributes, null, 2) : "";
    for (const [name] of ACCESS) access[name].value = (stored.access?.[name] ?? []).join(", ");
    accessState.textContent = stored.access
      ? "This document has an access list: only the users and groups named may see it (all empty: nobody)."
      : "No access list: whoever may query the collection sees it (unless the collection requires one). "
        + "Name a user or a group to restrict it.";
  };
  fill();
  const save = h("button", { type: "submit", class: "primary" }, "Save attributes and access");
  // An access list with every list empty admits nobody; removing it (null) lets document_access decide again.
  const removeAccess = h("button", { type: "button", hidden: !stored.access, onclick: async () => {
    if (!(await confirmDialog(`Remove the access list of "${d}"? Whoever may query the collection will see it, `
      + "unless the collection requires access lists.", "Remove access list"))) return;
    await send({ access: null });
  } }, "Remove access list");
  const form = h("form", { class: "card form metadata-form", novalidate: true, "aria-label": "Attributes and access" },
    h("h2", {}, "Attributes and access"),
    h("div", { class: "field f-attributes" }, h("label", { for: attributes.id }, "Attributes (JSON)"), attributes,
      h("p", { class: "help", id: "d-attributes-help" }, "key -> string, number, true/false or a list of strings; ",
        "what query filters match"), errors.attributes),
    h("fieldset", { class: "field f-access" }, h("legend", {}, "Access list"), accessState,
      h("div", { class: "row" }, ACCESS.map(([name, label]) => h("div", { class: "field" },
        h("label", { for: access[name].id }, label), access[name]))), errors.access),
    formError, h("div", { class: "actions" }, save, removeAccess));
  async function send(body) {
    save.disabled = removeAccess.disabled = true;
    try {
      const saved = await api("PUT", `/v1/collections/${enc(c)}/documents/${enc(d)}`, body);
      stored = { attributes: saved.attributes ?? {}, access: saved.access ?? null };
      fill();
      removeAccess.hidden = !stored.access;
      clear(notice).append(h("p", { class: "ok", "data-saved": "metadata" }, "Saved attributes and access ",
        `(the document is ${String(saved.status).replace("_", " ")} until the index has them).`));
    } catch (error) {
      showFieldErrors(error, errors, inputs, formError);
    } finally {
      save.disabled = removeAccess.disabled = false;
    }
  }
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    for (const p of Object.values(errors)) p.textContent = "";
    clear(formError);
    const body = {};
    let parsed;
    try { parsed = attributes.value.trim() ? JSON.parse(attributes.value) : {}; } catch (e) {
      errors.attributes.textContent = `attributes: not valid JSON (${e.message})`;
      attributes.focus();
      return;
    }
    if (JSON.stringify(parsed) !== JSON.stringify(stored.attributes)) body.attributes = parsed;
    const lists = Object.fromEntries(ACCESS.map(([name]) => [name, listOf(access[name].value)]));
    const named = Object.values(lists).some((l) => l.length);
    // Without an access list and nothing named, none is created (an empty one would hide the document from all).
    if ((stored.access || named) && JSON.stringify(lists) !== JSON.stringify(normalAccess(stored.access))) {
      body.access = lists;
    }
    if (!Object.keys(body).length) { clear(notice).append(h("p", { class: "ok" }, "Nothing changed.")); return; }
    await send(body);
  });
  return form;
}

function normalAccess(access) {
  return Object.fromEntries(ACCESS.map(([name]) => [name, access?.[name] ?? []]));
}
