// Type-checks a Grafana dashboard JSON file against Grafana's own TypeScript types, the
// ones Grafana's frontend is built with (npm @grafana/schema, pinned in package.json):
// the whole dashboard as `Dashboard`, and each panel again with its `options` and
// `fieldConfig.defaults.custom` as the panel plugin's own `Options` / `FieldConfig`
// (timeseries, stat, heatmap, ...). Object literals get TypeScript's excess-property check,
// so a misspelt key fails as well as a wrong type or an unknown enum value.
//
//   node check_schema.mjs DASHBOARD.json   (run from anywhere; exit 0 = valid, 1 = not)
//
// JSON has no enums: every string enum of the types is widened to the union of its values
// (`Json<T>` below), so "list" checks against LegendDisplayMode's "list" | "table" | ...
// Numeric enums already accept their number literals.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, 'package.json'));
const ts = require('typescript');
const schemaPackage = require('@grafana/schema/package.json');

const file = process.argv[2];
if (!file) {
  console.error('usage: node check_schema.mjs DASHBOARD.json');
  process.exit(2);
}
let dashboard;
try {
  dashboard = JSON.parse(fs.readFileSync(file, 'utf8'));
} catch (e) {
  console.error(`${file}: not readable JSON: ${e.message}`);
  process.exit(1);
}

// The panel plugins whose options types @grafana/schema ships, by directory name.
const panelModules = new Map();
for (const key of Object.keys(schemaPackage.exports)) {
  const m = key.match(/^\.\/dist\/esm\/raw\/composable\/([a-z0-9]+)\/panelcfg\/x\/(\w+)_types\.gen$/);
  if (!m) continue;
  const typesFile = path.join(here, 'node_modules/@grafana/schema', schemaPackage.exports[key].types);
  const hasFieldConfig = /^export interface FieldConfig\b/m.test(fs.readFileSync(typesFile, 'utf8'));
  panelModules.set(m[1], { specifier: `@grafana/schema${key.slice(1)}`, hasFieldConfig });
}

const lines = [
  "import type { Dashboard, Panel, RowPanel, FieldConfigSource, FieldConfig } from '@grafana/schema';",
];
const imports = new Map();
const checks = [];
const literal = (v) => JSON.stringify(v, null, 2);
const walk = (panels, where) => {
  (panels ?? []).forEach((p, i) => {
    const at = `${where}[${i}] (${p.type} "${p.title ?? ''}")`;
    if (p.type === 'row') {
      walk(p.panels, `${at}.panels`);
      return;
    }
    const dir = String(p.type).replace(/-/g, '');
    const mod = panelModules.get(dir);
    if (!mod) {
      checks.push({ at, error: `panel type "${p.type}" has no options type in @grafana/schema ${schemaPackage.version}` });
      return;
    }
    const alias = `cfg_${dir}`;
    imports.set(alias, mod);
    checks.push({ at, alias, panel: p });
  });
};
walk(dashboard.panels, 'panels');

for (const [alias, mod] of imports) lines.push(`import type * as ${alias} from '${mod.specifier}';`);
lines.push(
  'type Json<T> = T extends string ? (string extends T ? string : `${T}`)',
  '  : T extends ReadonlyArray<infer U> ? Array<Json<U>>',
  '  : T extends object ? { [K in keyof T]: Json<T[K]> } : T;',
  '// A panel with its plugin\'s options and custom field config (loose where the plugin has none).',
  'type TypedPanel<O, C> = Omit<Panel, "options" | "fieldConfig"> & {',
  '  options: O;',
  '  fieldConfig: Omit<FieldConfigSource, "defaults"> & { defaults: Omit<FieldConfig, "custom"> & { custom?: C } };',
  '};',
);
// Line numbers of the generated file map diagnostics back to a panel.
const marks = [];
const lineCount = () => lines.join('\n').split('\n').length;
lines.push(`// ${file}`);
marks.push({ line: lineCount(), at: 'dashboard' });
lines.push(`export const dashboard: Json<Dashboard> = ${literal(dashboard)};`);
const errors = [];
checks.forEach((c, i) => {
  if (c.error) {
    errors.push(`${file}: ${c.at}: ${c.error}`);
    return;
  }
  marks.push({ line: lineCount(), at: c.at });
  const custom = imports.get(c.alias).hasFieldConfig ? `${c.alias}.FieldConfig` : 'Record<string, unknown>';
  lines.push(`export const panel_${i}: Json<TypedPanel<${c.alias}.Options, ${custom}>> = ${literal(c.panel)};`);
});

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'spotvisor-grafana-schema-'));
try {
  fs.symlinkSync(path.join(here, 'node_modules'), path.join(dir, 'node_modules'));
  const source = path.join(dir, 'dashboard.ts');
  fs.writeFileSync(source, lines.join('\n') + '\n');
  const options = {
    strict: true, noEmit: true, skipLibCheck: true, target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext,
    types: [], noUncheckedIndexedAccess: true, exactOptionalPropertyTypes: false,
  };
  const program = ts.createProgram([source], options);
  for (const d of ts.getPreEmitDiagnostics(program)) {
    const text = ts.flattenDiagnosticMessageText(d.messageText, '\n  ');
    if (!d.file || d.file.fileName !== source) {
      errors.push(`${file}: ${text}`);
      continue;
    }
    const { line } = d.file.getLineAndCharacterOfPosition(d.start ?? 0);
    const mark = marks.filter((m) => m.line <= line).pop();
    const snippet = d.file.text.split('\n')[line].trim();
    errors.push(`${file}: ${mark ? mark.at : 'dashboard'}: near \`${snippet}\`: ${text}`);
  }
} finally {
  fs.rmSync(dir, { recursive: true, force: true });
}

if (errors.length) {
  console.error(errors.join('\n'));
  console.error(`${errors.length} error(s) against @grafana/schema ${schemaPackage.version} (TypeScript ${ts.version})`);
  process.exit(1);
}
console.log(`${file}: valid against @grafana/schema ${schemaPackage.version} (Dashboard, ` +
  `and ${checks.length} panels with their plugin's Options/FieldConfig; TypeScript ${ts.version}, strict)`);
