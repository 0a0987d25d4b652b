// Reindex jobs: start one for a collection, watch its progress. The API has no job list, so the console remembers
// the jobs started in this tab (sessionStorage, like the key).
import { api, enc } from "./api.js";
import { clear, empty, errorBox, h, loading } from "./dom.js";

const JOBS = "kindex.jobs";
const POLL_MS = 1000;

function remembered() {
  try { return JSON.parse(sessionStorage.getItem(JOBS)) || []; } catch { return []; }
}

function remember(job) {
  const jobs = remembered().filter((j) => j.id !== job.id);
  jobs.unshift({ id: job.id, collection: job.collection, created_at: job.created_at });
  sessionStorage.setItem(JOBS, JSON.stringify(jobs.slice(0, 20)));
}

export async function startReindex(collection, clean) {
  const job = await api("POST", `/v1/collections/${enc(collection)}/reindex`, { clean });
  remember(job);
  return job;
}

export async function reindexPanel(panel, collection, signal) {
  const clean = h("input", { type: "checkbox", id: "clean" });
  const out = h("div", { "aria-live": "polite" });
  const start = h("button", { type: "submit", class: "primary" }, "Start reindex");
  const form = h("form", { class: "card form" },
    h("p", {}, "Re-processes outdated and retryable failed documents and repairs drift. The collection is at ",
      `configuration v${collection.config_version}, model ${collection.active_embedding_model
        || collection.embedding_model}.`),
    h("div", { class: "field check" }, clean, h("label", { for: "clean" }, "Clean: rebuild every document")),
    h("div", { class: "actions" }, start), out);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    start.disabled = true;
    try {
      const job = await startReindex(collection.id, clean.checked);
      clear(out).append(jobView(job, signal));
    } catch (error) {
      clear(out).append(errorBox(error));
    } finally {
      start.disabled = false;
    }
  });
  panel.append(form);
}

function jobView(job, signal) {
  const bar = h("progress", { max: 1, value: 0, "aria-label": "Reindex progress" });
  const text = h("p", { role: "status" });
  const repaired = h("p", { class: "muted" });
  const box = h("div", { class: "job card", "data-job": job.id },
    h("h3", {}, "Job ", h("code", {}, job.id), " · ", h("a", { href: `#/collections/${enc(job.collection)}` },
      job.collection)), bar, text, repaired);
  const paint = (j) => {
    bar.max = Math.max(j.total, 1);
    bar.value = j.status === "completed" ? bar.max : j.done;
    text.textContent = `${j.status} · ${j.done} of ${j.total} documents done · ${j.enqueued} enqueued` +
      (j.clean ? " · clean" : "");
    const fixes = Object.entries(j.repaired || {}).filter(([, n]) => n);
    repaired.textContent = fixes.length ? "Repaired: " + fixes.map(([k, n]) => `${k.replaceAll("_", " ")} ${n}`)
      .join(", ") : "";
  };
  paint(job);
  (async () => {
    let current = job;
    while (current.status !== "completed" && !signal.aborted) {
      await new Promise((r) => setTimeout(r, POLL_MS));
      if (signal.aborted) return;
      try { current = await api("GET", `/v1/jobs/${enc(job.id)}`, undefined, { signal }); paint(current); } catch (error) {
        if (error.name === "AbortError") return;
        box.append(errorBox(error));
        return;
      }
    }
  })();
  return box;
}

export async function jobsScreen(main, [jobId], signal) {
  main.append(h("h1", {}, "Jobs"));
  const collection = h("input", { id: "job-collection", name: "collection", required: true, autocomplete: "off",
                                  list: "collection-ids" });
  const ids = h("datalist", { id: "collection-ids" });
  const clean = h("input", { type: "checkbox", id: "job-clean" });
  const out = h("div", { "aria-live": "polite" });
  const form = h("form", { class: "card form" }, h("h2", {}, "Reindex a collection"),
    h("div", { class: "field" }, h("label", { for: "job-collection" }, "Collection"), collection, ids),
    h("div", { class: "field check" }, clean, h("label", { for: "job-clean" }, "Clean: rebuild every document")),
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, "Start reindex")), out);
  api("GET", "/v1/collections?number=1000", undefined, { signal })
    .then((page) => ids.append(...page.collections.map((c) => h("option", { value: c })))).catch(() => {});
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const job = await startReindex(collection.value.trim(), clean.checked);
      location.hash = `#/jobs/${enc(job.id)}`;
    } catch (error) {
      clear(out).append(errorBox(error));
    }
  });
  main.append(form);
  const watched = h("section", { "aria-label": "Jobs of this session" }, h("h2", {}, "Jobs started in this tab"));
  main.append(watched);
  const jobs = remembered();
  if (jobId && !jobs.some((j) => j.id === jobId)) jobs.unshift({ id: jobId });
  if (!jobs.length) { watched.append(empty("No jobs started in this tab yet.")); return; }
  for (const { id } of jobs) {
    const slot = h("div", {}, loading());
    watched.append(slot);
    api("GET", `/v1/jobs/${enc(id)}`, undefined, { signal })
      .then((job) => clear(slot).append(jobView(job, signal)))
      .catch((error) => { if (error.name !== "AbortError") clear(slot).append(errorBox(error)); });
  }
}
