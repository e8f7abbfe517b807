// The page's one intake of event streams: Server-Sent Events, one message per core event (sim/engine/events.py), named by its
// kind, whose JSON carries the same kind as `type`.
//   kvscope.stream.take(id, receive)     every message of the htmx SSE element #id (#run-stream, #live-stream): parsed
//                                        and handed to receive(event); htmx is told not to dispatch it as a DOM event
//   kvscope.stream.follow(url, kinds, receive)  a stream the page opens itself (the watch view's, one per upstream;
//                                        the browser reconnects it): each message of the named kinds to receive(event, kind);
//                                        returns the EventSource, for its onerror
// Loaded first of the page's scripts (base.html), before htmx can open a stream.
(() => {
  "use strict";

  const takers = new Map(); // element id -> receive

  document.addEventListener("htmx:sse:before:message", (evt) => {
    const receive = takers.get(evt.target?.id);
    if (!receive) return;
    evt.detail.cancelled = true; // named events are ours to apply, not DOM events
    const { event: kind, data } = evt.detail.message;
    if (!kind || !data) return;
    receive(JSON.parse(data));
  });

  function follow(url, kinds, receive) {
    const source = new EventSource(url);
    for (const kind of kinds) {
      source.addEventListener(kind, (msg) => {
        if (typeof msg.data !== "string") return; // the browser's own "error" (a broken connection) carries no data
        receive(JSON.parse(msg.data), kind);
      });
    }
    return source;
  }

  window.kvscope = { ...window.kvscope, stream: { take: (id, receive) => takers.set(id, receive), follow } };
})();
