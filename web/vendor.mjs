// Copies the files package.json lists under "vendor" (destination: source in node_modules)
// into the console's static directory, dropping source-map comments (the maps are not
// shipped, so a browser's developer tools would ask for files that do not exist), and
// writes versions.json: what was copied, from which package and version, and its size,
// and each package's licence beside the files (the explorer plugin's tarball has none: its
// package.json says MIT, the same as GraphiQL's repository).
import { copyFileSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, "..", "codeshot", "api", "console", "static", "vendor");
const { vendor } = JSON.parse(readFileSync(join(here, "package.json"), "utf8"));

function packageOf(source) {
  const parts = source.split("/");
  const name = source.startsWith("@") ? parts.slice(0, 2).join("/") : parts[0];
  const { version, license } = JSON.parse(
    readFileSync(join(here, "node_modules", name, "package.json"), "utf8"));
  return { name, version, license };
}

rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
const versions = {};
for (const [file, source] of Object.entries(vendor)) {
  const text = readFileSync(join(here, "node_modules", source), "utf8")
    .replace(/\n?\/[/*]# sourceMappingURL=\S+?(?: \*\/)?\s*$/, "\n");
  writeFileSync(join(out, file), text);
  const origin = packageOf(source);
  versions[file] = { ...origin, bytes: Buffer.byteLength(text) };
  const licence = join(here, "node_modules", origin.name, "LICENSE");
  if (existsSync(licence)) {
    copyFileSync(licence, join(out, `LICENSE.${origin.name.replace("/", "-")}.txt`));
  }
}
writeFileSync(join(out, "versions.json"), JSON.stringify(versions, null, 2) + "\n");
console.log(`copied ${Object.keys(vendor).length} files to ${out}`);
