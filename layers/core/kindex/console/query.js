// Query playground: what an application asks for one of its users (with an attribute filter), the answer as the API
// gives it (results with scores, pages and citation numbers, the LLM context block, denials, warnings, timings), and
// the citation renderer. A filter the API refuses (422) is shown at the filter box, with the place it names.
import { api, enc } from "./api.js";
import { clear, errorBox, h, loading } from "./dom.js";

const MODES = ["hybrid", "vector", "keyword"];
const list = (text) => text.split(",").map((s) => s.trim()).filter(Boolean);

export async function queryScreen(main, _params, signal) {
  main.append(h("h1", {}, "Query playground"));
  const f = {
    collections: h("input", { id: "q-collections", autocomplete: "off", required: true, list: "q-collection-ids" }),
    query: h("textarea", { id: "q-text", rows: 2, required: true }),
    mode: h("select", { id: "q-mode" }, MODES.map((m) => h("option", { value: m }, m))),
    k: h("input", { id: "q-k", type: "number", min: 1, max: 100, value: 5 }),
    user: h("input", { id: "q-user", autocomplete: "off" }),
    groups: h("input", { id: "q-groups", autocomplete: "off" }),
    filter: h("textarea", { id: "q-filter", rows: 2, spellcheck: "false", "aria-describedby": "q-filter-error",
      placeholder: '{"region": "eu", "year": {"$gte": 2020}}' }),
  };
  const filterError = h("p", { class: "field-error", id: "q-filter-error", "aria-live": "polite" });
  const ids = h("datalist", { id: "q-collection-ids" });
  api("GET", "/v1/collections?number=1000", undefined, { signal })
    .then((page) => ids.append(...page.collections.map((c) => h("option", { value: c })))).catch(() => {});
  const field = (key, label, help, error) => h("div", { class: `field f-${key}` },
    h("label", { for: f[key].id }, label), f[key], help ? h("p", { class: "help" }, help) : null, error);
  const run = h("button", { type: "submit", class: "primary" }, "Run query");
  const out = h("div", { class: "query-out", "aria-live": "polite" });
  const form = h("form", { class: "card form query-form" },
    field("collections", "Collections", "one, or several separated by commas"), ids,
    field("query", "Query"),
    h("div", { class: "row" }, field("mode", "Mode"), field("k", "k"),
      field("user", "User", "empty: a guest"), field("groups", "Groups", "comma-separated")),
    field("filter", "Attribute filter (JSON)", "optional: filters.attributes - $eq $ne $gt $gte $lt $lte $in $nin "
      + "$exists $contains $starts_with, $and, $or; keys side by side are AND", filterError),
    h("div", { class: "actions" }, run));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const collections = list(f.collections.value);
    if (!collections.length || !f.query.value.trim()) {
      clear(out).append(errorBox({ code: "invalid_input", message: "name a collection and write a query" }));
      return;
    }
    const body = { query: f.query.value, mode: f.mode.value, k: Number(f.k.value || 5), groups: list(f.groups.value) };
    if (f.user.value.trim()) body.user = f.user.value.trim();
    filterError.textContent = "";
    if (f.filter.value.trim()) {
      try { body.filters = { attributes: JSON.parse(f.filter.value) }; } catch (e) {
        filterError.textContent = `filters.attributes: not valid JSON (${e.message})`;
        f.filter.focus();
        return;
      }
    }
    const path = collections.length === 1 ? `/v1/collections/${enc(collections[0])}/query` : "/v1/query";
    if (collections.length > 1) body.collections = collections;
    run.disabled = true;
    clear(out).append(loading("Querying…"));
    const started = performance.now();
    try {
      const answer = await api("POST", path, body, { signal });
      clear(out).append(answerView(answer, Math.round(performance.now() - started)));
    } catch (error) {
      if (error.name === "AbortError") return;
      if (error.status === 422 && error.message.startsWith("filters")) {
        clear(out);
        filterError.textContent = error.message;
        f.filter.focus();
      } else clear(out).append(errorBox(error));
    } finally {
      run.disabled = false;
    }
  });
  main.append(form, out);
}

function answerView(answer, roundTripMs) {
  const timings = Object.entries(answer.timing_ms || {}).map(([k, v]) => `${k} ${Number(v).toFixed(1)} ms`);
  const facts = h("p", { class: "facts-line" },
    h("span", {}, `${answer.results.length} results`),
    h("span", { class: answer.denied_count ? "warn" : "" }, `${answer.denied_count} denied`),
    answer.denied_collections?.length ? h("span", { class: "warn" },
      `collections refused: ${answer.denied_collections.join(", ")}`) : null,
    h("span", { class: "muted" }, `timings: ${timings.join(", ") || "none"} · round trip ${roundTripMs} ms`),
    h("span", { class: "muted" }, "query id ", h("code", {}, answer.query_id)));
  const warnings = (answer.warnings || []).map((w) => h("div", { class: "warning", role: "alert" },
    h("strong", {}, `${w.collection}: ${w.code}`), ` ${w.message}`));
  const results = answer.results.length ? h("ol", { class: "results" }, answer.results.map((r) =>
    h("li", { class: "result" },
      h("div", { class: "meta" }, h("span", { class: "cit", title: "citation number" }, `[${r.citation}]`), " ",
        h("a", { href: `#/collections/${enc(r.collection)}/documents/${enc(r.document_id)}` }, r.title || r.document_id),
        h("span", { class: "muted" }, ` ${r.collection}/${r.document_id}`),
        r.page_start != null ? h("span", { class: "muted" }, r.page_end && r.page_end !== r.page_start
          ? ` · pages ${r.page_start}–${r.page_end}` : ` · page ${r.page_start}`) : null,
        h("span", { class: "score" }, `score ${Number(r.score).toFixed(4)}`)),
      h("pre", {}, r.content))))
    : h("p", { class: "empty" }, answer.denied_count ? "Nothing this user may see matched." : "Nothing matched.");
  const citations = (answer.citations || []).length ? h("ul", { class: "citations" }, answer.citations.map((c) =>
    h("li", {}, `[${c.n}] `, c.title || c.document_id, h("span", { class: "muted" }, ` ${c.collection}/${c.document_id}`),
      c.url ? [" ", safeLink(c.url)] : null))) : null;
  return h("div", {}, facts, warnings,
    h("h2", {}, "Results"), results,
    citations ? [h("h2", {}, "Citations"), citations] : null,
    h("details", { class: "context" }, h("summary", {}, "Context block (as the LLM sees it)"),
      h("pre", { id: "context-block" }, answer.context)),
    citationBox(answer.query_id));
}

function safeLink(url) {
  try {
    const parsed = new URL(url);
    if (parsed.protocol === "https:" || parsed.protocol === "http:") {
      return h("a", { href: parsed.href, rel: "noopener noreferrer", target: "_blank" }, parsed.href);
    }
  } catch { /* not a URL: shown as text */ }
  return h("span", {}, url);
}

// The LLM's answer with <CIT id /> tags -> footnotes, by POST /v1/citations for this query.
function citationBox(queryId) {
  const text = h("textarea", { id: "answer-text", rows: 4, placeholder: "You get 25 days <CIT leave-policy />." });
  const out = h("div", { class: "rendered", "aria-live": "polite" });
  const form = h("form", { class: "card form" }, h("h2", {}, h("label", { for: "answer-text" },
    "Paste the LLM's answer")), text, h("div", { class: "actions" },
    h("button", { type: "submit" }, "Render citations")), out);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clear(out).append(loading("Rendering…"));
    try {
      const rendered = await api("POST", "/v1/citations", { text: text.value, query_id: queryId });
      clear(out).append(h("div", { class: "answer-html" }, sanitized(rendered.html)),
        h("details", {}, h("summary", {}, "Markdown"), h("pre", {}, rendered.markdown)));
    } catch (error) {
      clear(out).append(errorBox(error));
    }
  });
  return form;
}

// The API's HTML is sanitized already; this keeps only plain text markup and http(s)/fragment links anyway.
const ALLOWED = new Set(["P", "A", "SUP", "SUB", "OL", "UL", "LI", "EM", "STRONG", "B", "I", "CODE", "PRE", "BR",
  "SECTION", "HR", "SPAN", "DIV", "BLOCKQUOTE", "H1", "H2", "H3", "H4", "H5", "H6"]);

export function sanitized(html) {
  const doc = new DOMParser().parseFromString(html, "text/html");
  const walk = (node) => {
    for (const child of [...node.children]) {
      if (!ALLOWED.has(child.tagName)) { child.replaceWith(document.createTextNode(child.textContent)); continue; }
      for (const attr of [...child.attributes]) {
        const keep = ["id", "class", "role"].includes(attr.name)
          || (attr.name === "href" && /^(https?:|#)/i.test(attr.value.trim()));
        if (!keep) child.removeAttribute(attr.name);
      }
      if (child.tagName === "A") { child.setAttribute("rel", "noopener noreferrer"); }
      walk(child);
    }
  };
  walk(doc.body);
  const fragment = document.createDocumentFragment();
  fragment.append(...doc.body.childNodes);
  return fragment;
}
