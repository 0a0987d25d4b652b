// The only module that talks to the network: the public /v1 API of the kindex that served this page, and the
// presigned upload URLs it hands out. The key lives in sessionStorage (gone with the tab), never in a URL or cookie.
const KEY_NAME = "kindex.apiKey";
// The page is served at <base>/console (base is "" locally, "/<stage>" behind API Gateway).
export const apiBase = location.pathname.replace(/\/console\/?$/, "");

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export const session = {
  get key() { return sessionStorage.getItem(KEY_NAME); },
  set key(value) {
    if (value) sessionStorage.setItem(KEY_NAME, value); else sessionStorage.removeItem(KEY_NAME);
  },
};

export const enc = encodeURIComponent;

export async function api(method, path, body, { signal, signingIn = false } = {}) {
  if (!path.startsWith("/v1/")) throw new Error("the console calls /v1 routes only");
  const headers = { Authorization: `Bearer ${session.key}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(apiBase + path, {
      method, headers, body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store", credentials: "omit", redirect: "error", signal,
    });
  } catch (error) {
    if (error.name === "AbortError") throw error;
    throw new ApiError(0, "network", "kindex did not answer (network error)");
  }
  if (response.status === 204) return null;
  const text = await response.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = null; }
  if (!response.ok) {
    if (response.status === 401 && !signingIn) window.dispatchEvent(new CustomEvent("kindex:unauthorized"));
    throw new ApiError(response.status, data?.error ?? "http_" + response.status,
                       data?.message ?? `HTTP ${response.status}`);
  }
  return data;
}

// PUT the file's bytes to a presigned URL with progress (fetch cannot report upload progress; XHR can).
export function putFile(url, method, headers, file, onProgress) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open(method || "PUT", url);
    for (const [name, value] of Object.entries(headers || {})) {
      // The browser sets Content-Length itself (the same value the URL was signed for).
      if (name.toLowerCase() !== "content-length") xhr.setRequestHeader(name, value);
    }
    xhr.upload.onprogress = (e) => { if (e.lengthComputable) onProgress(e.loaded / e.total); };
    xhr.onload = () => (xhr.status >= 200 && xhr.status < 300 ? resolve()
      : reject(new ApiError(xhr.status, "upload_failed", uploadMessage(xhr))));
    xhr.onerror = () => reject(new ApiError(0, "network", "the upload did not reach its URL"));
    xhr.send(file);
  });
}

function uploadMessage(xhr) {
  try { return JSON.parse(xhr.responseText).message; } catch { return `upload answered HTTP ${xhr.status}`; }
}
