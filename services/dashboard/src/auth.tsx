// API keys in the browser: asked for when the API requires one, kept in sessionStorage only
// (gone when the tab closes), and the actions a key's scopes do not allow are hidden.
import { createContext, useCallback, useContext, useEffect, useState, type FormEvent, type ReactNode } from "react";
import { ApiError, api, describeError, setApiKey, unwrap } from "./api/client";
import type { Identity } from "./api/types";

const STORAGE_KEY = "dtq.apiKey";

export type Scope = "read" | "submit" | "admin";

type Auth = {
  identity: Identity;
  apiKey: string | null;
  can: (scope: Scope) => boolean;
  signOut: () => void;
};

const AuthContext = createContext<Auth | null>(null);

export function useAuth(): Auth {
  const auth = useContext(AuthContext);
  if (!auth) throw new Error("useAuth outside AuthGate");
  return auth;
}

function storedKey(): string | null {
  try {
    return window.sessionStorage.getItem(STORAGE_KEY);
  } catch {
    return null;
  }
}

function whoami(key: string | null): Promise<Identity> {
  setApiKey(key);
  return unwrap(api.GET("/api/v1/auth/whoami"));
}

type Phase =
  | { kind: "checking" }
  | { kind: "ready"; identity: Identity; key: string | null }
  | { kind: "login"; message: string | null }
  | { kind: "unreachable"; message: string };

export function AuthGate({ children }: { children: (apiKey: string | null) => ReactNode }) {
  const [phase, setPhase] = useState<Phase>({ kind: "checking" });

  const check = useCallback(async (key: string | null, remember: boolean) => {
    try {
      const identity = await whoami(key);
      if (identity.auth === "keys" && identity.scopes.length === 0) {
        setPhase({ kind: "login", message: null });
        return;
      }
      if (!identity.scopes.includes("read")) {
        setApiKey(null);
        setPhase({
          kind: "login",
          message: `The key “${identity.name ?? ""}” can only ${identity.scopes.join(" and ")}: the dashboard needs a key with the read scope (or admin).`,
        });
        return;
      }
      if (remember && key) window.sessionStorage.setItem(STORAGE_KEY, key);
      setPhase({ kind: "ready", identity, key: identity.auth === "keys" ? key : null });
    } catch (e) {
      setApiKey(null);
      if (e instanceof ApiError && e.status === 401) {
        window.sessionStorage.removeItem(STORAGE_KEY);
        setPhase({ kind: "login", message: "That key is not valid. Check it and try again." });
      } else {
        setPhase({ kind: "unreachable", message: describeError(e) });
      }
    }
  }, []);

  useEffect(() => {
    void check(storedKey(), false);
  }, [check]);

  const signOut = useCallback(() => {
    window.sessionStorage.removeItem(STORAGE_KEY);
    setApiKey(null);
    setPhase({ kind: "login", message: "Signed out. The key is no longer kept in this tab." });
  }, []);

  switch (phase.kind) {
    case "checking":
      return <p className="splash" role="status">Connecting to the dtq API…</p>;
    case "unreachable":
      return (
        <main className="splash">
          <h1>The dtq API cannot be reached</h1>
          <p role="alert">{phase.message}</p>
          <button type="button" onClick={() => void check(storedKey(), false)}>Try again</button>
        </main>
      );
    case "login":
      return <Login message={phase.message} onSubmit={(key) => check(key, true)} />;
    case "ready": {
      const { identity, key } = phase;
      const auth: Auth = {
        identity,
        apiKey: key,
        can: (scope) => identity.scopes.includes(scope) || identity.scopes.includes("admin"),
        signOut,
      };
      return <AuthContext.Provider value={auth}>{children(key)}</AuthContext.Provider>;
    }
  }
}

function Login({ message, onSubmit }: { message: string | null; onSubmit: (key: string) => Promise<void> }) {
  const [key, setKey] = useState("");
  const [busy, setBusy] = useState(false);
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    if (!key.trim()) return;
    setBusy(true);
    await onSubmit(key.trim());
    setBusy(false);
  };
  return (
    <main className="login">
      <form onSubmit={(e) => void submit(e)} aria-labelledby="login-title">
        <h1 id="login-title">Sign in to dtq</h1>
        <p>
          This dtq deployment requires an API key. Paste a key with the <code>read</code> scope to
          watch, or <code>admin</code> to act. It is kept only for this browser tab.
        </p>
        {message && (
          <p className="error-text" role="alert">
            {message}
          </p>
        )}
        <label htmlFor="api-key">API key</label>
        <input
          id="api-key"
          name="api-key"
          type="password"
          autoComplete="off"
          autoFocus
          value={key}
          onChange={(e) => setKey(e.target.value)}
          placeholder="dtq_…"
        />
        <button type="submit" className="primary" disabled={busy || !key.trim()}>
          {busy ? "Checking…" : "Sign in"}
        </button>
        <p className="hint">
          An operator makes keys with <code>dtq keys new NAME SCOPES</code>.
        </p>
      </form>
    </main>
  );
}
