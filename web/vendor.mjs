// Copies the files package.json lists under "vendor" (destination: source in node_modules)
// into the console's static directory, dropping source-map comments (the maps are not
// shipped, so a browser's developer tools would ask for files that do not exist).
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, "..", "codeshot", "api", "console", "static", "vendor");
const { vendor } = JSON.parse(readFileSync(join(here, "package.json"), "utf8"));

rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
for (const [name, source] of Object.entries(vendor)) {
  const text = readFileSync(join(here, "node_modules", source), "utf8");
  writeFileSync(join(out, name), text.replace(/\n?\/[/*]# sourceMappingURL=\S+?(?: \*\/)?\s*$/, "\n"));
}
console.log(`copied ${Object.keys(vendor).length} files to ${out}`);
