// Small building blocks shared by the views.
import { createContext, useCallback, useContext, useEffect, useRef, useState, type ReactNode } from "react";
import { describeError } from "../api/client";
import { absolute, count, relative, toMs } from "../format";
import { type Resource, useNow } from "../live/context";

export function StatusBadge({ status }: { status: string }) {
  return <span className={`badge status-${status}`}>{status}</span>;
}

export function RelTime({ at }: { at: string | number | Date | null | undefined }) {
  const now = useNow();
  const ms = toMs(at);
  if (Number.isNaN(ms)) return <span className="muted">–</span>;
  return (
    <time dateTime={new Date(ms).toISOString()} title={absolute(ms)}>
      {relative(at, now)}
    </time>
  );
}

export function Empty({ title, children }: { title: string; children?: ReactNode }) {
  return (
    <div className="empty" role="status">
      <p className="empty-title">{title}</p>
      {children && <div className="empty-body">{children}</div>}
    </div>
  );
}

export function ErrorBox({ error, retry, what }: { error: unknown; retry?: () => void; what: string }) {
  return (
    <div className="error-box" role="alert">
      <p>
        <strong>Could not load {what}.</strong> {describeError(error)}
      </p>
      {retry && (
        <button type="button" onClick={retry}>
          Try again
        </button>
      )}
    </div>
  );
}

export function Loading({ what }: { what: string }) {
  return (
    <p className="muted" role="status">
      Loading {what}…
    </p>
  );
}

/** A modal confirmation built on <dialog>: focus moves in, Escape cancels. */
export function ConfirmDialog({
  open,
  title,
  children,
  confirmLabel,
  danger,
  onConfirm,
  onCancel,
}: {
  open: boolean;
  title: string;
  children: ReactNode;
  confirmLabel: string;
  danger?: boolean;
  onConfirm: () => void;
  onCancel: () => void;
}) {
  const ref = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    const dialog = ref.current;
    if (!dialog) return;
    if (open && !dialog.open) dialog.showModal();
    if (!open && dialog.open) dialog.close();
  }, [open]);
  return (
    <dialog ref={ref} className="confirm" aria-labelledby="confirm-title" onCancel={(e) => { e.preventDefault(); onCancel(); }}>
      <h2 id="confirm-title">{title}</h2>
      <div className="confirm-body">{children}</div>
      <div className="actions">
        <button type="button" onClick={onCancel} autoFocus>
          Cancel
        </button>
        <button type="button" className={danger ? "danger" : "primary"} onClick={onConfirm}>
          {confirmLabel}
        </button>
      </div>
    </dialog>
  );
}

type Toast = { id: number; text: string; kind: "ok" | "error" };
type Toaster = { ok: (text: string) => void; fail: (error: unknown, what: string) => void };
const ToastContext = createContext<Toaster>({ ok: () => undefined, fail: () => undefined });

export function useToast(): Toaster {
  return useContext(ToastContext);
}

export function ToastProvider({ children }: { children: ReactNode }) {
  const [toasts, setToasts] = useState<Toast[]>([]);
  const next = useRef(1);
  const push = useCallback((text: string, kind: Toast["kind"]) => {
    const id = next.current++;
    setToasts((all) => [...all.slice(-3), { id, text, kind }]);
    window.setTimeout(() => setToasts((all) => all.filter((t) => t.id !== id)), kind === "ok" ? 4000 : 8000);
  }, []);
  const [toaster] = useState<Toaster>(() => ({
    ok: (text) => push(text, "ok"),
    fail: (error, what) => push(`${what} failed: ${describeError(error)}`, "error"),
  }));
  return (
    <ToastContext.Provider value={toaster}>
      {children}
      <div className="toasts" aria-live="polite">
        {toasts.map((t) => (
          <div key={t.id} className={`toast toast-${t.kind}`} role={t.kind === "error" ? "alert" : "status"}>
            {t.text}
          </div>
        ))}
      </div>
    </ToastContext.Provider>
  );
}

/** Runs an action once at a time, reporting its outcome as a toast. */
export function useAction() {
  const toast = useToast();
  const [busy, setBusy] = useState<string | null>(null);
  const run = useCallback(
    async (name: string, action: () => Promise<string | void>): Promise<boolean> => {
      setBusy(name);
      try {
        const message = await action();
        if (message) toast.ok(message);
        return true;
      } catch (e) {
        toast.fail(e, name);
        return false;
      } finally {
        setBusy(null);
      }
    },
    [toast],
  );
  return { busy, run };
}

export function Meter({ value, max, label }: { value: number; max: number; label: string }) {
  const ratio = max > 0 ? Math.min(1, value / max) : 0;
  return (
    <span className="meter" role="meter" aria-valuenow={value} aria-valuemin={0} aria-valuemax={max} aria-label={label}>
      <span className="meter-fill" style={{ width: `${ratio * 100}%` }} />
    </span>
  );
}

/** Newer/older paging over the API's opaque cursors: `cursors` is the stack of pages seen. */
export function Pager({
  cursors,
  setCursors,
  next,
  labels = ["← Newer", "Older →"],
}: {
  cursors: (string | null)[];
  setCursors: (update: (c: (string | null)[]) => (string | null)[]) => void;
  next: string | null | undefined;
  /** The back and forward buttons' text (lists by name page alphabetically, not by age). */
  labels?: [string, string];
}) {
  return (
    <nav className="pager" aria-label="Pages">
      <button type="button" disabled={cursors.length === 1} onClick={() => setCursors((c) => c.slice(0, -1))}>
        {labels[0]}
      </button>
      <span className="muted">Page {count(cursors.length)}</span>
      <button
        type="button"
        disabled={!next}
        onClick={() => {
          if (next) setCursors((c) => [...c, next]);
        }}
      >
        {labels[1]}
      </button>
    </nav>
  );
}

/** A resource's states in one place: its error (with a retry), its first load, its empty
 * state (when `empty` returns one), else `children` with the data. */
export function Loaded<T>({
  resource,
  what,
  empty,
  children,
}: {
  resource: Resource<T>;
  what: string;
  empty?: (data: T) => ReactNode;
  children: (data: T) => ReactNode;
}) {
  if (resource.error !== undefined && !resource.data) {
    return <ErrorBox error={resource.error} retry={resource.reload} what={`the ${what}`} />;
  }
  if (resource.data === undefined) return <Loading what={what} />;
  const none = empty?.(resource.data);
  if (none) return <>{none}</>;
  return <>{children(resource.data)}</>;
}
