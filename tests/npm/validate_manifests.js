// Validates Kubernetes manifests (deploy/kubernetes/) the way a cluster would, offline:
// built-in kinds against the Kubernetes OpenAPI schemas (kubernetes-models), the CRDs
// PyTorchJob and JobSet against their JSON schemas in crd_schemas/ (ajv) with every
// embedded pod or job template against the Kubernetes schemas again. Then spotvisor's own
// contract: the pod's terminationGracePeriodSeconds covers the job file's signals.grace +
// signals.kill_timeout + a margin (read by `spotvisor run --print-config` from the
// ConfigMap the pod mounts), and the stop exit code is one the controller retries.
// Usage: node validate_manifests.js --spotvisor BIN FILE.yaml...   Exit 0 = all valid.
'use strict';

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const {execFileSync} = require('node:child_process');
const YAML = require('yaml');
const Ajv = require('ajv');

const kMarginSeconds = 5;  // the report, the termination message and exit, after the group is gone

const {ConfigMap} = require('kubernetes-models/v1/ConfigMap');
const {PersistentVolumeClaim} = require('kubernetes-models/v1/PersistentVolumeClaim');
const {PodTemplateSpec} = require('kubernetes-models/v1/PodTemplateSpec');
const {Job} = require('kubernetes-models/batch/v1/Job');
const {JobTemplateSpec} = require('kubernetes-models/batch/v1/JobTemplateSpec');

const builtin = {
  'v1/ConfigMap': ConfigMap,
  'v1/PersistentVolumeClaim': PersistentVolumeClaim,
  'batch/v1/Job': Job,
};

const ajv = new Ajv({allErrors: true, strict: true});
const crdSchema = name => ajv.compile(JSON.parse(fs.readFileSync(path.join(__dirname, 'crd_schemas', name), 'utf8')));
const crds = {
  'kubeflow.org/v1/PyTorchJob': crdSchema('pytorchjob.schema.json'),
  'jobset.x-k8s.io/v1alpha2/JobSet': crdSchema('jobset.schema.json'),
};

function parseArgs(argv) {
  const out = {spotvisor: '', files: []};
  for (let i = 0; i < argv.length; ++i) {
    if (argv[i] === '--spotvisor') out.spotvisor = argv[++i];
    else out.files.push(argv[i]);
  }
  if (!out.spotvisor || out.files.length === 0) {
    throw new Error('usage: node validate_manifests.js --spotvisor BIN FILE.yaml...');
  }
  return out;
}

// "1h2m3s", "25s", "500ms" -> seconds.
function seconds(text) {
  let total = 0;
  const re = /(\d+)(ms|h|m|s)/g;
  let matched = '';
  for (let m; (m = re.exec(String(text)));) {
    matched += m[0];
    total += Number(m[1]) * {h: 3600, m: 60, s: 1, ms: 0.001}[m[2]];
  }
  if (matched !== String(text)) throw new Error(`not a duration: '${text}'`);
  return total;
}

function kubernetesErrors(model, object, where) {
  try {
    new model(object).validate();
    return [];
  } catch (e) {
    return [`${where}: ${e.message}`];
  }
}

// [{where, podSpec, stopPolicy}] for every pod template in `doc`.
function podTemplates(doc, where) {
  const kind = doc.kind;
  if (kind === 'Job') {
    return [{where, pod: doc.spec.template.spec, job: doc.spec, controller: 'Job'}];
  }
  if (kind === 'PyTorchJob') {
    return Object.entries(doc.spec.pytorchReplicaSpecs).map(([type, r]) => (
      {where: `${where} replica ${type}`, pod: r.template.spec, restartPolicy: r.restartPolicy, controller: 'PyTorchJob'}));
  }
  if (kind === 'JobSet') {
    return doc.spec.replicatedJobs.map(r => (
      {where: `${where} replicatedJob ${r.name}`, pod: r.template.spec.template.spec, job: r.template.spec,
       controller: 'JobSet'}));
  }
  return [];
}

function schemaErrors(doc, where) {
  const key = `${doc.apiVersion}/${doc.kind}`;
  if (builtin[key]) return kubernetesErrors(builtin[key], doc, where);
  const check = crds[key];
  if (!check) return [`${where}: ${key} is not a kind this validator knows`];
  if (!check(doc)) return check.errors.map(e => `${where}: ${e.instancePath || '/'} ${e.message}`);
  const errors = [];
  if (doc.kind === 'PyTorchJob') {
    for (const [type, r] of Object.entries(doc.spec.pytorchReplicaSpecs)) {
      errors.push(...kubernetesErrors(PodTemplateSpec, r.template, `${where} replica ${type} template`));
    }
  } else {
    for (const r of doc.spec.replicatedJobs) {
      errors.push(...kubernetesErrors(JobTemplateSpec, r.template, `${where} replicatedJob ${r.name} template`));
    }
  }
  return errors;
}

// The effective job of the spotvisor container of `pod`, from the ConfigMap it mounts.
function effectiveJob(pod, configMaps, spotvisor, where) {
  const container = (pod.containers || []).find(c => (c.command || []).includes('spotvisor'));
  if (!container) throw new Error(`${where}: no container runs spotvisor`);
  const argv = [...(container.command || []), ...(container.args || [])];
  const configAt = argv.indexOf('--config');
  if (configAt < 0) throw new Error(`${where}: container ${container.name} runs spotvisor without --config`);
  const configPath = argv[configAt + 1];
  const mount = (container.volumeMounts || []).find(m => m.mountPath === path.posix.dirname(configPath));
  if (!mount) throw new Error(`${where}: nothing is mounted at ${path.posix.dirname(configPath)}`);
  const volume = (pod.volumes || []).find(v => v.name === mount.name);
  if (!volume || !volume.configMap) throw new Error(`${where}: volume ${mount.name} is not a ConfigMap`);
  const map = configMaps.get(volume.configMap.name);
  const text = map && map.data && map.data[path.posix.basename(configPath)];
  if (text === undefined) {
    throw new Error(`${where}: ConfigMap ${volume.configMap.name} key ${path.posix.basename(configPath)} is not in the files given`);
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'spotvisor-manifest-'));
  try {
    fs.writeFileSync(path.join(dir, 'job.yaml'), text);
    const printed = execFileSync(spotvisor, ['run', '--config', path.join(dir, 'job.yaml'), '--print-config'],
                                 {encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe']});
    return {container, job: YAML.parse(printed)};
  } catch (e) {
    throw new Error(`${where}: the job file in ConfigMap ${volume.configMap.name} is refused by spotvisor: ${(e.stderr || e.message).trim()}`);
  } finally {
    fs.rmSync(dir, {recursive: true, force: true});
  }
}

function contractErrors(t, configMaps, spotvisor) {
  const {container, job} = effectiveJob(t.pod, configMaps, spotvisor, t.where);
  const errors = [];
  const grace = seconds(job.signals.grace), kill = seconds(job.signals.kill_timeout);
  const need = grace + kill + kMarginSeconds;
  const have = t.pod.terminationGracePeriodSeconds ?? 30;  // the Kubernetes default
  if (have < need) {
    errors.push(`${t.where}: terminationGracePeriodSeconds ${have} is below signals.grace ${job.signals.grace} + ` +
                `signals.kill_timeout ${job.signals.kill_timeout} + ${kMarginSeconds}s margin = ${need}s: the kubelet's ` +
                `SIGKILL would cut spotvisor's stop short`);
  }
  const code = job.job.stop_exit_code;
  if (t.controller === 'PyTorchJob' && t.restartPolicy === 'ExitCode' && !(code >= 128)) {
    errors.push(`${t.where}: restartPolicy ExitCode treats exit code ${code} (job.stop_exit_code) as permanent: use 129-255`);
  }
  if (t.job) {
    const rules = (t.job.podFailurePolicy && t.job.podFailurePolicy.rules) || [];
    const covered = rules.some(r => r.onExitCodes && r.onExitCodes.operator === 'In' &&
                                    r.onExitCodes.values.includes(code) &&
                                    (!r.onExitCodes.containerName || r.onExitCodes.containerName === container.name));
    if (!covered) {
      errors.push(`${t.where}: podFailurePolicy has no onExitCodes rule for ${code} (job.stop_exit_code) on ` +
                  `container ${container.name}: a resumable stop would count as a failure`);
    }
    if (t.pod.restartPolicy !== 'Never') errors.push(`${t.where}: podFailurePolicy needs restartPolicy: Never`);
  }
  return errors;
}

function main() {
  const {spotvisor, files} = parseArgs(process.argv.slice(2));
  const docs = [];
  const errors = [];
  for (const file of files) {
    const parsed = YAML.parseAllDocuments(fs.readFileSync(file, 'utf8'));
    parsed.forEach((d, i) => {
      if (d.errors.length) errors.push(`${file} document ${i + 1}: ${d.errors[0].message}`);
      else if (d.toJS() !== null) docs.push({file, doc: d.toJS(), where: `${file} document ${i + 1}`});
    });
  }
  const configMaps = new Map();
  for (const {doc} of docs) if (doc.kind === 'ConfigMap') configMaps.set(doc.metadata.name, doc);
  for (const {doc, where} of docs) {
    const named = `${where} (${doc.kind} ${doc.metadata && doc.metadata.name})`;
    const found = schemaErrors(doc, named);
    errors.push(...found);
    if (found.length) continue;
    for (const t of podTemplates(doc, named)) {
      try {
        errors.push(...contractErrors(t, configMaps, spotvisor));
      } catch (e) {
        errors.push(e.message);
      }
    }
  }
  for (const e of errors) console.error(`invalid: ${e}`);
  if (errors.length) process.exit(1);
  console.log(`valid: ${docs.length} documents in ${files.length} files`);
}

main();
