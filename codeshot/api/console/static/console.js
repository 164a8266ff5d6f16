// The console's glue around htmx: the signed-in credential (session storage, sent as a
// Bearer header, never in a URL), loading the page's content, errors shown where the user
// acted, and small conveniences (local times, copying a new key, Ctrl+Enter).
// The pages themselves are rendered by the server (codeshot/api/console).
"use strict";

(function () {
  const STORE = "codeshot.credential";
  const main = document.getElementById("main");
  const nav = document.getElementById("nav");
  const dialog = document.getElementById("signin-dialog");
  const signinPage = document.getElementById("signin-page");

  // -- the credential -------------------------------------------------------------------
  // {method, token}: "api-key" (read from its form below) or "account" (an ID token the
  // platform hands back after an email and password sign-in, in a "codeshot:signed-in"
  // event); either is sent as a Bearer.
  const readers = {
    "api-key": (form) => form.elements.api_key.value.trim(),
  };

  function credential() {
    try {
      return JSON.parse(sessionStorage.getItem(STORE) || "null");
    } catch (_) {
      return null;
    }
  }

  function forget() {
    sessionStorage.removeItem(STORE);
  }

  document.body.addEventListener("htmx:configRequest", (event) => {
    const current = credential();
    if (current && current.token) {
      event.detail.headers.Authorization = "Bearer " + current.token;
    }
  });

  // -- showing a page ---------------------------------------------------------------------
  let contentShown = false;

  // Each request from its own source element: htmx lets one element have one request in
  // flight, and both would come from <body> otherwise.
  function load(url) {
    // An aborted load was replaced by a newer request (hx-sync): nothing to report.
    htmx.ajax("GET", url, { source: main, target: main, swap: "innerHTML" }).catch(() => {});
  }

  function showSignIn(reason) {
    forget();
    nav.hidden = true;
    document.getElementById("whoami").textContent = "";
    if (contentShown) {
      // Keep the page (a message being written, a form being filled): sign in over it.
      showError(dialog.querySelector(".form-error"), reason);
      if (!dialog.open) dialog.showModal();
      dialog.querySelector("input").focus();
      return;
    }
    const loading = document.getElementById("loading");
    if (loading) loading.hidden = true;
    signinPage.hidden = false;
    showError(signinPage.querySelector(".form-error"), reason);
    signinPage.querySelector("input").focus();
  }

  function signedIn() {
    nav.hidden = false;
    const whoami = document.getElementById("whoami");
    htmx.ajax("GET", "/console/signed-in", { source: whoami, target: whoami, swap: "innerHTML" })
      .catch(() => {});
  }

  function useCredential(form, method, token) {
    sessionStorage.setItem(STORE, JSON.stringify({ method: method, token: token }));
    form.reset();
    if (dialog.open) dialog.close();
    signedIn();
    if (!contentShown) {
      signinPage.hidden = true;
      load(main.dataset.url);
    }
  }

  for (const form of document.querySelectorAll("form[data-signin]")) {
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const token = readers[form.dataset.signin](form);
      if (!token) {
        showError(form.querySelector(".form-error"), textError("INVALID_INPUT", "Enter an API key."));
        return;
      }
      useCredential(form, form.dataset.signin, token);
    });
  }

  // Fired while htmx still handles the sign-in's response: load the page once that
  // request is over, or the page's request (hx-sync on #main) would abort it.
  document.body.addEventListener("codeshot:signed-in", (event) => {
    const form = event.target.closest("form");
    const token = event.detail.token;
    setTimeout(() => useCredential(form, "account", token), 0);
  });

  document.getElementById("sign-out").addEventListener("click", () => {
    sessionStorage.clear(); // the key, and GraphiQL's tabs and history (they hold headers)
    window.location.assign("/console/");
  });

  // -- errors -----------------------------------------------------------------------------
  function textError(code, message) {
    const p = document.createElement("p");
    p.className = "error";
    const strong = document.createElement("strong");
    strong.className = "code";
    strong.textContent = code;
    p.append(strong, " " + message);
    return p;
  }

  function showError(slot, content) {
    if (!slot) return;
    slot.replaceChildren();
    if (!content) return;
    if (typeof content === "string") {
      slot.innerHTML = content; // the server's error fragment (rendered escaped)
    } else {
      slot.append(content);
    }
  }

  function slotFor(element) {
    const scope = element && element.closest ? element.closest("form, [data-error-slot]") : null;
    return (scope && scope.querySelector(".form-error")) || document.getElementById("flash");
  }

  // What a refused request says: the server's HTML fragment, or the REST error body
  // ({"error": {"code", "message"}}) that requests refused before any route get.
  function errorContent(xhr) {
    const type = xhr.getResponseHeader("Content-Type") || "";
    if (type.startsWith("text/html")) {
      // A page that could not be shown has a heading and links around its message,
      // which is all a form or the sign-in needs.
      const page = new DOMParser().parseFromString(xhr.responseText, "text/html");
      const message = page.querySelector("p.error");
      return message ? message.outerHTML : xhr.responseText;
    }
    try {
      const error = JSON.parse(xhr.responseText).error;
      if (error && error.code) return textError(error.code, error.message || "");
    } catch (_) { /* not JSON either */ }
    return textError("HTTP " + xhr.status, "The platform refused the request.");
  }

  // Refusals (4xx, 5xx) are not swapped (the htmx-config in shell.html): shown here.
  document.body.addEventListener("htmx:beforeSwap", (event) => {
    const xhr = event.detail.xhr;
    if (xhr.status < 400 || xhr.status === 422) return;
    const source = event.detail.requestConfig.elt; // (detail.elt is the swap target)
    // A refused sign-in (a wrong password) is shown on its form, not taken as signed out.
    const signingIn = source && source.closest && source.closest("[data-account]");
    if (xhr.status === 401 && !signingIn) {
      const reason = errorContent(xhr);
      showSignIn(typeof reason === "string" ? reason : reason.outerHTML);
      return;
    }
    const isPage = event.detail.target === main && event.detail.requestConfig.verb === "get";
    if (isPage && (xhr.getResponseHeader("Content-Type") || "").startsWith("text/html")) {
      event.detail.shouldSwap = true; // the page could not be shown: the server says why
      contentShown = true;
      return;
    }
    showError(slotFor(source), errorContent(xhr));
    resumePolling(source);
  });

  document.body.addEventListener("htmx:sendError", (event) => {
    const elt = event.detail.elt;
    if (elt.id === "poller") {
      retryPolling(elt);
      return;
    }
    showError(slotFor(elt), textError("NETWORK", "Could not reach the platform; nothing was changed. Try again."));
    resumePolling(elt);
  });

  document.body.addEventListener("htmx:afterRequest", (event) => {
    const xhr = event.detail.xhr;
    if (!event.detail.successful || xhr.status >= 400) return;
    const elt = event.detail.elt;
    if (elt.id === "poller") {
      polling.failures = 0;
      setPollStatus("");
    }
    if (event.detail.target === main) {
      contentShown = true;
      document.getElementById("flash").replaceChildren();
    }
    const form = elt.closest ? elt.closest("form") : null;
    if (!form) return;
    const slot = form.querySelector(".form-error");
    if (slot) slot.replaceChildren();
    if (form.hasAttribute("data-chat-form")) {
      form.reset();
      newIdempotencyKey(form);
      const field = form.querySelector("textarea, input[name=text]");
      if (field && document.body.contains(field)) field.focus();
    }
  });

  // -- the chat's long poll ---------------------------------------------------------------
  const polling = { failures: 0 };

  function setPollStatus(text) {
    const status = document.getElementById("poll-status");
    if (status) status.textContent = text;
  }

  // A chat form's request replaced (aborted) the poll; if it failed, poll again.
  function resumePolling(elt) {
    const poller = document.getElementById("poller");
    if (poller && poller.hasAttribute("hx-get") && elt && elt.hasAttribute && elt.hasAttribute("data-chat-form")) {
      htmx.trigger(poller, "codeshot:retry");
    }
  }

  function retryPolling(poller) {
    polling.failures += 1;
    const seconds = Math.min(2 ** polling.failures, 30);
    setPollStatus("Lost contact with the platform; trying again in " + seconds + " s.");
    setTimeout(() => {
      if (document.body.contains(poller)) htmx.trigger(poller, "codeshot:retry");
    }, seconds * 1000);
  }

  // -- forms ------------------------------------------------------------------------------
  function newIdempotencyKey(form) {
    const field = form.querySelector("input[name=idempotency_key]");
    if (!field) return;
    const bytes = new Uint8Array(16);
    crypto.getRandomValues(bytes);
    field.value = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  // Refuse a message over the limit here, with its length, before sending megabytes.
  document.body.addEventListener("htmx:confirm", (event) => {
    const form = event.detail.elt.closest ? event.detail.elt.closest("form[data-max-length]") : null;
    if (!form) return;
    const text = form.elements.text.value;
    const limit = Number(form.dataset.maxLength);
    if (text.length > limit) {
      event.preventDefault();
      showError(form.querySelector(".form-error"), textError("INVALID_INPUT",
        "This message is " + text.length.toLocaleString() + " characters long; the limit is " +
        limit.toLocaleString() + ". Nothing was sent: shorten it and send again."));
    }
  });

  // htmx wires a swapped-in form only once the swap settles (20 ms on, later on a busy
  // machine). A submit before that (Ctrl+Enter, Enter in a field) would go out natively:
  // a GET of the page with the message in its URL, and no message sent. Wire it now and
  // send it as htmx would. (htmx's own submit events are CustomEvents: no loop.)
  document.body.addEventListener("submit", (event) => {
    const form = event.target;
    if (event.defaultPrevented || !(event instanceof SubmitEvent) ||
        !form.matches("[hx-post], [hx-put], [hx-patch], [hx-delete]")) {
      return;
    }
    event.preventDefault();
    htmx.process(form);
    htmx.trigger(form, "submit");
  });

  document.body.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey) && event.target.form &&
        event.target.form.hasAttribute("data-chat-form")) {
      event.preventDefault();
      event.target.form.requestSubmit();
    }
  });

  document.body.addEventListener("click", (event) => {
    const button = event.target.closest ? event.target.closest("[data-copy]") : null;
    if (!button) return;
    const field = document.querySelector(button.dataset.copy);
    field.select();
    navigator.clipboard.writeText(field.value).then(
      () => { button.textContent = "Copied"; },
      () => { button.textContent = "Select and copy"; });
  });

  // -- every new piece of page ------------------------------------------------------------
  htmx.onLoad((root) => {
    for (const time of root.querySelectorAll("time[data-local]")) {
      time.textContent = new Date(time.dateTime).toLocaleString([], {
        dateStyle: "medium", timeStyle: "short" });
      time.title = time.dateTime;
    }
    for (const form of root.querySelectorAll("form[data-chat-form]")) newIdempotencyKey(form);
    const bad = root.querySelector("textarea[data-error-line]");
    if (bad) selectLine(bad, Number(bad.dataset.errorLine));
  });

  // A grammar error names a line: put the caret there.
  function selectLine(textarea, index) {
    const lines = textarea.value.split("\n");
    const start = lines.slice(0, index).reduce((n, line) => n + line.length + 1, 0);
    textarea.focus();
    textarea.setSelectionRange(start, start + (lines[index] || "").length);
  }

  document.body.addEventListener("htmx:afterSettle", (event) => {
    if (event.detail.target !== main) return;
    const section = window.location.pathname.startsWith("/console/agents") ? "agents"
      : window.location.pathname.startsWith("/console/account") ? "account"
      : window.location.pathname.startsWith("/console/users") ? "users" : "chat";
    for (const link of nav.querySelectorAll("a[data-nav]")) {
      if (link.dataset.nav === section) link.setAttribute("aria-current", "page");
      else link.removeAttribute("aria-current");
    }
    // A new page's heading takes the focus, unless the user is already in the new page (a
    // field clicked while the swap settled, later on a busy machine): keep what they type.
    const inPage = main.contains(document.activeElement) && document.activeElement !== main;
    if (!inPage && !main.querySelector("[data-error-line]")) {
      const heading = main.querySelector("h1");
      if (heading) heading.focus({ preventScroll: true });
    }
  });

  // -- start (after htmx has read the page and its config) ------------------------------
  document.addEventListener("DOMContentLoaded", () => {
    // Back from Google or GitHub: the page carries the account's ID token (kept like any
    // credential, then gone from the page and the address bar), or why it failed.
    const handoff = document.querySelector('meta[name="codeshot-signed-in"]');
    if (handoff) {
      sessionStorage.setItem(STORE, JSON.stringify({ method: "account", token: handoff.content }));
      handoff.remove();
    }
    const refused = document.querySelector('meta[name="codeshot-sign-in-refused"]');
    if (handoff || refused) window.history.replaceState(null, "", main.dataset.url);
    if (credential()) {
      signedIn();
      load(main.dataset.url);
    } else {
      showSignIn(refused ? textError(refused.dataset.code, refused.content) : "");
    }
  });
})();
