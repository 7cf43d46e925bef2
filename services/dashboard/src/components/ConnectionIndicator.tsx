// Where the live event stream stands: live, connecting, reconnecting (with the next try), or
// degraded (the gateway lost Redis).
import { useConnectionState, useNow } from "../live/context";

export function ConnectionIndicator() {
  const state = useConnectionState();
  const now = useNow();
  let label: string;
  let detail: string;
  switch (state.kind) {
    case "live":
      label = "Live";
      detail = "Receiving events from the gateway.";
      break;
    case "connecting":
      label = "Connecting";
      detail = "Opening the event stream…";
      break;
    case "degraded":
      label = "Degraded";
      detail = "The gateway cannot read Redis; events resume when it can.";
      break;
    case "reconnecting": {
      const wait = Math.max(0, Math.ceil((state.retryAt - now) / 1000));
      label = "Disconnected";
      detail = `${state.lastError}; retrying${wait ? ` in ${wait} s` : ""} (attempt ${state.attempt}). Missed events are replayed on reconnect.`;
      break;
    }
  }
  return (
    <span className={`conn conn-${state.kind}`} data-state={state.kind} role="status" aria-live="polite" title={detail}>
      <span className="dot" aria-hidden="true" />
      <span className="conn-label">{label}</span>
      <span className="visually-hidden">: {detail}</span>
    </span>
  );
}
