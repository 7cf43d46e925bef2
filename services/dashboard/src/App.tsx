// The shell: sign-in gate, live connection, navigation and the views.
import { useEffect, useRef } from "react";
import { AuthGate, useAuth } from "./auth";
import { ConnectionIndicator } from "./components/ConnectionIndicator";
import { ToastProvider } from "./components/ui";
import { LiveProvider } from "./live/context";
import { Link, useLocation } from "./router";
import { DlqView } from "./views/Dlq";
import { GroupsView, groupsRoute } from "./views/Groups";
import { Overview } from "./views/Overview";
import { QueuesView } from "./views/Queues";
import { SchedulesView } from "./views/Schedules";
import { TaskDetail } from "./views/TaskDetail";
import { TasksView } from "./views/Tasks";
import { WorkersView } from "./views/Workers";
import { WorkflowDetail } from "./views/WorkflowDetail";
import { WorkflowsView } from "./views/Workflows";

const NAV = [
  { to: "/", label: "Overview" },
  { to: "/queues", label: "Queues" },
  { to: "/tasks", label: "Tasks" },
  { to: "/workflows", label: "Workflows" },
  { to: "/dlq", label: "Dead letters" },
  { to: "/workers", label: "Workers" },
  { to: "/schedules", label: "Schedules" },
];

export function App() {
  return (
    <ToastProvider>
      <AuthGate>
        {(apiKey) => (
          // One provider per key: nothing read with another key stays in the cache.
          <LiveProvider key={apiKey ?? ""} apiKey={apiKey}>
            <Shell />
          </LiveProvider>
        )}
      </AuthGate>
    </ToastProvider>
  );
}

function Shell() {
  const { path } = useLocation();
  const { identity, signOut, can } = useAuth();
  const main = useRef<HTMLElement>(null);
  const section = "/" + (path.split("/")[1] ?? "");
  const current = NAV.find((n) => n.to === section) ?? NAV[0];

  useEffect(() => {
    document.title = `${current?.label ?? "dtq"} · dtq`;
  }, [current]);

  return (
    <>
      <a className="skip-link" href="#main" onClick={(e) => { e.preventDefault(); main.current?.focus(); }}>
        Skip to content
      </a>
      <header className="topbar">
        <Link to="/" className="brand" aria-label="dtq overview">
          dtq
        </Link>
        <nav aria-label="Main">
          <ul>
            {NAV.map((item) => (
              <li key={item.to}>
                <Link to={item.to} aria-current={item === current ? "page" : undefined}>
                  {item.label}
                </Link>
              </li>
            ))}
          </ul>
        </nav>
        <div className="session">
          <ConnectionIndicator />
          {identity.auth === "keys" ? (
            <span className="who">
              <span title={`scopes: ${identity.scopes.join(", ")}`}>
                {identity.name}
                {!can("admin") && <span className="badge read-only">read-only</span>}
              </span>
              <button type="button" className="link" onClick={signOut}>
                Sign out
              </button>
            </span>
          ) : (
            <span className="badge open-mode" title="No API keys are configured: anyone who reaches this page can operate dtq.">
              open mode
            </span>
          )}
        </div>
      </header>
      <main id="main" ref={main} tabIndex={-1}>
        <Route path={path} />
      </main>
    </>
  );
}

function Route({ path }: { path: string }) {
  if (path === "/" || path === "") return <Overview />;
  if (path === "/queues") return <QueuesView />;
  const groupsOf = groupsRoute(path);
  if (groupsOf !== null) return <GroupsView key={groupsOf} queue={groupsOf} />;
  if (path === "/tasks") return <TasksView />;
  if (path.startsWith("/tasks/")) return <TaskDetail id={decodeURIComponent(path.slice("/tasks/".length))} />;
  if (path === "/workflows") return <WorkflowsView />;
  if (path.startsWith("/workflows/")) {
    const id = decodeURIComponent(path.slice("/workflows/".length));
    return <WorkflowDetail key={id} id={id} />;
  }
  if (path === "/dlq") return <DlqView />;
  if (path === "/workers") return <WorkersView />;
  if (path === "/schedules") return <SchedulesView />;
  return (
    <section>
      <h1>Page not found</h1>
      <p>
        Nothing lives at <code>{path}</code>. Go to the <Link to="/">overview</Link>.
      </p>
    </section>
  );
}
