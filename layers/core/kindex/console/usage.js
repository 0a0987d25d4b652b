// The tenant's usage: what it stores against its plan's quotas, and what it used today and this month.
import { api } from "./api.js";
import { formatBytes, h } from "./dom.js";

const STORED = [
  ["documents", "Documents", (n) => n.toLocaleString()],
  ["chunks", "Chunks", (n) => n.toLocaleString()],
  ["bytes", "Stored bytes", formatBytes],
  ["collections", "Collections", (n) => n.toLocaleString()],
];

export async function usageScreen(main, _params, signal) {
  main.append(h("h1", {}, "Usage"));
  const usage = await api("GET", "/v1/usage", undefined, { signal });
  const rows = STORED.map(([name, label, format]) => {
    const limit = usage.limits[name];
    const used = usage[name];
    const meter = limit === null || limit === undefined ? "" :
      h("meter", { min: 0, max: Math.max(limit, 1), value: Math.min(used, limit), "aria-label": `${label} used` });
    return h("tr", { "data-quota": name },
      h("th", { scope: "row" }, label), h("td", {}, format(used)),
      h("td", {}, limit === null || limit === undefined ? "no limit" : format(limit)), h("td", {}, meter));
  });
  main.append(
    h("section", { class: "card", "aria-labelledby": "stored-title" },
      h("h2", { id: "stored-title" }, "Stored, on plan ", h("code", {}, usage.plan)),
      h("table", {},
        h("thead", {}, h("tr", {}, h("th", {}, ""), h("th", { scope: "col" }, "Used"),
          h("th", { scope: "col" }, "Limit"), h("th", { scope: "col" }, ""))),
        h("tbody", {}, ...rows))),
    h("section", { class: "card", "aria-labelledby": "metered-title" },
      h("h2", { id: "metered-title" }, "Metered"),
      h("p", { "data-metered": "queries" }, `Queries today (${usage.day}, UTC): `,
        h("strong", {}, usage.queries_today.toLocaleString())),
      h("p", { "data-metered": "tokens" }, `Embedding tokens this month (${usage.month}, estimated): `,
        h("strong", {}, usage.embedding_tokens_month.toLocaleString()))));
}
