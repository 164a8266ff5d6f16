// GraphiQL from the console's own copies (no CDN). The Authorization header starts as
// the console's sign-in; GraphiQL keeps its tabs and history (which hold headers) in this
// tab's session storage, like the key itself, and the console's sign-out clears them.
"use strict";

(function () {
  let headers = "";
  try {
    const credential = JSON.parse(sessionStorage.getItem("codeshot.credential") || "null");
    if (credential && credential.token) {
      headers = JSON.stringify({ Authorization: "Bearer " + credential.token }, null, 2);
    }
  } catch (_) { /* no sign-in: the headers start empty */ }
  const element = document.getElementById("graphiql");
  const fetcher = GraphiQL.createFetcher({ url: new URL(element.dataset.endpoint, location.href).href });
  const explorer = GraphiQLPluginExplorer.explorerPlugin();
  ReactDOM.createRoot(element).render(React.createElement(GraphiQL, {
    fetcher: fetcher,
    defaultHeaders: headers,
    shouldPersistHeaders: false,
    storage: window.sessionStorage,
    defaultEditorToolsVisibility: headers ? "headers" : false,
    plugins: [explorer],
  }));
})();
