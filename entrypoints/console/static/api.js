// The console's JSON API (docs: /docs, contract: every request acts for one tenant).

const TOKEN_KEY = "plaita.console.token";
const TENANT_KEY = "plaita.console.tenant";

export class ApiError extends Error {
  constructor(status, body) {
    const detail = body?.detail;
    super(body?.message ?? (typeof detail === "string" ? detail : `The console answered HTTP ${status}.`));
    this.status = status;
    this.error = body?.error ?? (status ? `HTTP ${status}` : "NetworkError");
    this.body = body ?? {};
    // FastAPI's own 422 shape ({"detail": [...]}) reads the same as the contract's.
    this.fieldErrors = body?.field_errors ?? (Array.isArray(detail) ? detail : []);
  }
}

export class Session {
  get token() {
    return sessionStorage.getItem(TOKEN_KEY) ?? "";
  }

  set token(value) {
    if (value) sessionStorage.setItem(TOKEN_KEY, value);
    else sessionStorage.removeItem(TOKEN_KEY);
  }

  get tenant() {
    return sessionStorage.getItem(TENANT_KEY) || "default";
  }

  set tenant(value) {
    sessionStorage.setItem(TENANT_KEY, value || "default");
  }
}

export class Api {
  constructor(session, { onUnauthorized } = {}) {
    this.session = session;
    this.onUnauthorized = onUnauthorized;
  }

  get(path, params) {
    return this.request("GET", path, { params });
  }

  // tenant: false sends the body as it is (a shared flow definition names no tenant).
  post(path, body, { tenant = true } = {}) {
    return this.request("POST", path, { body, withTenant: tenant });
  }

  put(path, body, { tenant = true } = {}) {
    return this.request("PUT", path, { body, withTenant: tenant });
  }

  delete(path, params) {
    return this.request("DELETE", path, { params });
  }

  async request(method, path, { params, body, withTenant = true } = {}) {
    const url = new URL(`api/v1/${path}`, document.baseURI);
    const query = { ...params };
    if (body === undefined) query.tenant ??= this.session.tenant;
    for (const [key, value] of Object.entries(query)) {
      if (value !== undefined && value !== null && value !== "") url.searchParams.set(key, value);
    }
    const headers = { Accept: "application/json" };
    if (this.session.token) headers.Authorization = `Bearer ${this.session.token}`;
    const init = { method, headers };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(withTenant ? { tenant: this.session.tenant, ...body } : body);
    }
    let response;
    try {
      response = await fetch(url, init);
    } catch (cause) {
      throw new ApiError(0, {
        error: "NetworkError",
        message: `The console did not answer (${cause.message}). Is it still running?`,
      });
    }
    const text = await response.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch {
      data = { message: text.slice(0, 300) };
    }
    if (!response.ok) {
      const error = new ApiError(response.status, data);
      if (response.status === 401) this.onUnauthorized?.(error);
      throw error;
    }
    return data;
  }
}
