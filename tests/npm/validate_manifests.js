// Validates Kubernetes manifests (deploy/kubernetes/) the way a cluster would, offline:
// built-in kinds against the Kubernetes OpenAPI schemas (kubernetes-models), the CRDs
// PyTorchJob and JobSet against their JSON schemas in crd_schemas/ (ajv) with every
// embedded pod or job template against the Kubernetes schemas again. Then spotvisor's own
// contract: the pod's terminationGracePeriodSeconds covers the job file's signals.grace +
// signals.kill_timeout + a margin (read by `spotvisor run --print-config` from the
// ConfigMap the pod mounts), the stop exit code is one the controller retries, and a
// multi-node group holds together: coordination.nodes + coordination.spares is the number of
// pods that run the job file, with spares a lost pod is replaced alone (the podFailurePolicy
// Ignores preemptions) and a successPolicy never ends the Job before the nodes, each pod has
// its own state dir (a shared one: the second spotvisor exits 73) from a per-pod index that
// survives restarts, the checkpoint dir is on a ReadWriteMany volume, and a JobSet's pods
// resolve each other's host names.
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
const {Service} = require('kubernetes-models/v1/Service');
const {StatefulSet} = require('kubernetes-models/apps/v1/StatefulSet');
const {PodDisruptionBudget} = require('kubernetes-models/policy/v1/PodDisruptionBudget');
const {NetworkPolicy} = require('kubernetes-models/networking.k8s.io/v1/NetworkPolicy');
const {PodTemplateSpec} = require('kubernetes-models/v1/PodTemplateSpec');
const {Job} = require('kubernetes-models/batch/v1/Job');
const {JobTemplateSpec} = require('kubernetes-models/batch/v1/JobTemplateSpec');

const builtin = {
  'v1/ConfigMap': ConfigMap,
  'v1/PersistentVolumeClaim': PersistentVolumeClaim,
  'v1/Service': Service,
  'apps/v1/StatefulSet': StatefulSet,
  'policy/v1/PodDisruptionBudget': PodDisruptionBudget,
  'networking.k8s.io/v1/NetworkPolicy': NetworkPolicy,
  'batch/v1/Job': Job,
};

// The downward API's per-pod indices that stay the same when a pod is replaced: a Job's
// completion index (Indexed Jobs) and a JobSet's index of the Job in its replicated job.
const kCompletionIndex = "metadata.annotations['batch.kubernetes.io/job-completion-index']";
const kJobIndex = "metadata.labels['jobset.sigs.k8s.io/job-index']";

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

// [{where, pod, job, controller, pods, replicas, parallelism}] for every pod template in
// `doc`; `pods` is how many pods run from it at once.
function podTemplates(doc, where) {
  const kind = doc.kind;
  if (kind === 'Job') {
    const parallelism = doc.spec.parallelism ?? 1;
    return [{where, pod: doc.spec.template.spec, job: doc.spec, controller: 'Job', replicas: 1, parallelism,
             pods: parallelism}];
  }
  if (kind === 'PyTorchJob') {
    return Object.entries(doc.spec.pytorchReplicaSpecs).map(([type, r]) => (
      {where: `${where} replica ${type}`, pod: r.template.spec, restartPolicy: r.restartPolicy, controller: 'PyTorchJob',
       replicas: r.replicas ?? 1, parallelism: 1, pods: r.replicas ?? 1}));
  }
  if (kind === 'JobSet') {
    return doc.spec.replicatedJobs.map(r => {
      const replicas = r.replicas ?? 1, parallelism = r.template.spec.parallelism ?? 1;
      return {where: `${where} replicatedJob ${r.name}`, pod: r.template.spec.template.spec, job: r.template.spec,
              controller: 'JobSet', network: doc.spec.network || {}, replicas, parallelism,
              pods: replicas * parallelism};
    });
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
    // Relative paths (and defaults such as telemetry.state_dir) start at the job file's
    // directory: in the pod that is the mount, not this temporary copy.
    const inPod = printed.split(dir).join(path.posix.dirname(configPath));
    return {container, job: YAML.parse(inPod), jobFile: `ConfigMap ${volume.configMap.name} key ${path.posix.basename(configPath)}`};
  } catch (e) {
    const said = String(e.stderr || e.message).split(path.join(dir, 'job.yaml')).join(configPath).trim();
    throw new Error(`${where}: the job file in ConfigMap ${volume.configMap.name} is refused by spotvisor: ${said}`);
  } finally {
    fs.rmSync(dir, {recursive: true, force: true});
  }
}

// The volume mount of `container` that holds `dir` (the longest mountPath above it).
function mountOf(container, dir) {
  let best;
  for (const m of container.volumeMounts || []) {
    const top = m.mountPath.replace(/\/+$/, '');
    if ((dir === top || dir.startsWith(`${top}/`)) && (!best || top.length > best.mountPath.length)) best = m;
  }
  return best;
}

// Errors unless `dir` lies on a PersistentVolumeClaim of the pod, ReadWriteMany where `sharedBy`
// (a number of pods) is above 1.
// `what` describes the directory in messages.
function volumeErrors(t, container, pvcs, dir, what, sharedBy) {
  const mount = mountOf(container, dir);
  if (!mount) {
    return [`${t.where}: ${what} is on no volume of container ${container.name}: it would live and die ` +
            `with the container, and the next pod would start from nothing`];
  }
  const volume = (t.pod.volumes || []).find(v => v.name === mount.name);
  if (!volume || !volume.persistentVolumeClaim) {
    return [`${t.where}: ${what} is on volume ${mount.name}, which is not a persistentVolumeClaim: it would ` +
            `not outlive the pod`];
  }
  if (!(sharedBy > 1)) return [];
  const claim = volume.persistentVolumeClaim.claimName;
  const pvc = pvcs.get(claim);
  if (!pvc) return [`${t.where}: PersistentVolumeClaim ${claim} (volume ${mount.name}) is not in the files given`];
  const modes = (pvc.doc.spec && pvc.doc.spec.accessModes) || [];
  if (!modes.includes('ReadWriteMany')) {
    return [`${t.where}: ${what} is on PersistentVolumeClaim ${claim} (${pvc.where}) with accessModes ` +
            `[${modes.join(', ')}]: ${sharedBy} pods on ${sharedBy} nodes need ReadWriteMany`];
  }
  return [];
}

// A group of several pods: each spotvisor needs a state dir of its own that the same pod
// finds again after a restart, so `--state-dir` (or telemetry.state_dir) must name a per-pod
// index from the downward API that the pod keeps when it is replaced.
function stateDirErrors(t, container, job, jobFile) {
  const argv = [...(container.command || []), ...(container.args || [])];
  let dir = job.telemetry.state_dir, source = `telemetry.state_dir in ${jobFile}`;
  argv.forEach((a, i) => {
    if (a === '--state-dir' && i + 1 < argv.length) [dir, source] = [argv[i + 1], `--state-dir of container ${container.name}`];
    else if (a.startsWith('--state-dir=')) [dir, source] = [a.slice('--state-dir='.length), `--state-dir of container ${container.name}`];
  });
  const indices = new Set();
  for (const [, name] of String(dir).matchAll(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g)) {
    const env = (container.env || []).find(e => e.name === name);
    const field = env && env.valueFrom && env.valueFrom.fieldRef && env.valueFrom.fieldRef.fieldPath;
    if (field === kCompletionIndex || field === kJobIndex) indices.add(field);
  }
  const missing = [];
  if (t.parallelism > 1 && !indices.has(kCompletionIndex)) missing.push(`${kCompletionIndex} (parallelism ${t.parallelism})`);
  if (t.replicas > 1 && !indices.has(kJobIndex)) missing.push(`${kJobIndex} (replicas ${t.replicas})`);
  const errors = [];
  if (missing.length) {
    errors.push(`${t.where}: the state dir ${dir} (${source}) does not tell the ${t.pods} pods apart: it names no ` +
                `env var (in container ${container.name}'s env, expanded as $(NAME)) from the downward API's ` +
                `${missing.join(' and ')}; two spotvisors on one state dir refuse each other (exit 73), and a ` +
                `pod name or uid would change on every restart and lose the attempt ledger`);
  }
  const mode = t.job.completionMode ?? (t.controller === 'JobSet' ? 'Indexed' : 'NonIndexed');  // JobSet defaults it
  if (indices.has(kCompletionIndex) && mode !== 'Indexed') {
    errors.push(`${t.where}: completionMode ${mode}: the pods have no batch.kubernetes.io/job-completion-index ` +
                `annotation for the state dir ${dir}; use completionMode: Indexed`);
  }
  return {errors, dir: String(dir), source,
          // where it lies: the part before the first $(NAME)
          top: String(dir).replace(/\$\(.*$/, '').replace(/\/[^/]*$/, '') || '/'};
}

// What goes wrong when `pods` pods run a job file of `nodes` ranks and `spares` spares.
function podCountHarm(nodes, spares, pods) {
  if (pods < nodes) return 'every start would wait for nodes that never come';
  if (pods < nodes + spares) return `only ${pods - nodes} of the ${spares} spares would wait`;
  return spares ? `${pods - nodes} pods would wait as spares, more than the job file says`
                : 'the pods beyond it would find no free rank';
}

// The podFailurePolicy rule the Job controller applies to a failed pod: the first that matches
// (undefined: none, the failure counts against backoffLimit). A pod of one container.
function podFailureRule(rules, {conditions, container, exitCode}) {
  return rules.find(r => {
    if (r.onExitCodes) {
      const e = r.onExitCodes;
      if (e.containerName && e.containerName !== container) return false;
      const listed = (e.values || []).includes(exitCode);
      return e.operator === 'In' ? listed : !listed && exitCode !== 0;
    }
    return (r.onPodConditions || []).some(p => conditions.includes(p.type) && (p.status ?? 'True') === 'True');
  });
}

// Hot spares (coordination.spares): a lost pod is replaced alone, its replacement becomes the
// next spare; the spares exit 0 once the group is done, so a successPolicy is optional.
function spareErrors(t, container, job, jobFile) {
  const {nodes, spares} = job.coordination;
  const code = job.job.stop_exit_code;
  const errors = [];
  const what = `with coordination.spares ${spares} (${jobFile})`;
  const rules = (t.job.podFailurePolicy && t.job.podFailurePolicy.rules) || [];
  const backoff = t.job.backoffLimit ?? 6;  // the Kubernetes default
  const restarts = t.controller === 'JobSet' ? 'the JobSet restarts every pod' : 'every pod ends';
  const cases = [
    [`a preempted pod (condition DisruptionTarget, spotvisor exits ${code})`, ['DisruptionTarget'], code],
    [`spotvisor's resumable stop without a disruption condition (exit ${code}, job.stop_exit_code)`, [], code],
    ['a pod lost with its node (condition DisruptionTarget, container killed: 137)', ['DisruptionTarget'], 137],
  ];
  for (const [failure, conditions, exitCode] of cases) {
    const rule = podFailureRule(rules, {conditions, container: container.name, exitCode});
    if (rule && rule.action === 'Ignore') continue;
    const harm = !rule || rule.action === 'Count'
                     ? `${rule ? 'the first podFailurePolicy rule that matches it is Count' : 'no podFailurePolicy rule matches it'}: ` +
                           `it counts against backoffLimit ${backoff}, and past that the Job fails and ${restarts}`
                 : rule.action === 'FailJob' ? `the first podFailurePolicy rule that matches it is FailJob: the Job fails and ${restarts}`
                                             : `the first podFailurePolicy rule that matches it is ${rule.action}: the index is not replaced`;
    errors.push(`${t.where}: ${what} ${failure} must be replaced alone while the spare takes its rank, but ${harm}; ` +
                `make the first rule that matches it action Ignore`);
  }
  if ((t.job.podReplacementPolicy ?? (t.job.podFailurePolicy ? 'Failed' : 'TerminatingOrFailed')) !== 'Failed') {
    errors.push(`${t.where}: ${what} podReplacementPolicy ${t.job.podReplacementPolicy}: a replacement pod would ` +
                `start while the lost one still drains, on the same state dir (the second spotvisor exits 73); use Failed`);
  }
  const success = (t.job.successPolicy && t.job.successPolicy.rules) || [];
  for (const r of success.filter(r => r.succeededIndexes !== undefined)) {
    errors.push(`${t.where}: ${what} successPolicy rule succeededIndexes ${r.succeededIndexes}: which pods are the ` +
                `nodes at the end is not fixed (any pod may be a spare by then); use succeededCount ${nodes} alone`);
  }
  // Optional (a spare exits 0 once the group is done), but never below the nodes: the Job
  // would be declared done, and its pods terminated, while a node still trains.
  for (const r of success.filter(r => r.succeededCount !== undefined && r.succeededCount < nodes)) {
    errors.push(`${t.where}: ${what} successPolicy rule succeededCount ${r.succeededCount} is below ` +
                `coordination.nodes ${nodes}: the Job would end, terminating every pod, while a node still trains`);
  }
  return errors;
}

function contractErrors(t, resolved, groupPods, pvcs) {
  const {container, job, jobFile} = resolved;
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
  const {nodes, spares = 0} = job.coordination;
  if (nodes + spares !== groupPods) {
    errors.push(`${t.where}: coordination.nodes ${nodes}${spares ? ` + coordination.spares ${spares}` : ''} in ` +
                `${jobFile} is not the ${groupPods} pods that run it (replicas ${t.replicas} x parallelism ` +
                `${t.parallelism}): ` + podCountHarm(nodes, spares, groupPods));
  }
  if (spares > 0 && t.job) errors.push(...spareErrors(t, container, job, jobFile));
  errors.push(...volumeErrors(t, container, pvcs, job.checkpoints.dir,
                              `checkpoints.dir ${job.checkpoints.dir} (${jobFile})`, groupPods));
  if (groupPods > 1) {
    const state = stateDirErrors(t, container, job, jobFile);
    errors.push(...state.errors);
    errors.push(...volumeErrors(t, container, pvcs, state.top, `the state dir ${state.dir} (${state.source})`, 0));
    if (t.job && (t.job.completions ?? t.parallelism) !== t.parallelism) {
      errors.push(`${t.where}: completions ${t.job.completions} is not parallelism ${t.parallelism}: a group of ` +
                  `${nodes} nodes needs all its pods running at once`);
    }
    if (t.controller === 'JobSet' && t.network.enableDNSHostnames !== true) {
      errors.push(`${t.where}: spec.network.enableDNSHostnames is not true: the ${groupPods} pods could not resolve ` +
                  `each other's host names ({master_addr} is rank 0's coordination.advertise, its \`hostname -f\`)`);
    }
  } else {
    errors.push(...volumeErrors(t, container, pvcs, job.telemetry.state_dir,
                                `telemetry.state_dir ${job.telemetry.state_dir} (${jobFile})`, 0));
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
  const configMaps = new Map(), pvcs = new Map();
  for (const {doc, where} of docs) {
    const byName = {ConfigMap: configMaps, PersistentVolumeClaim: pvcs}[doc.kind];
    if (!byName || !doc.metadata) continue;
    const seen = byName.get(doc.metadata.name);
    if (seen) errors.push(`${where}: ${doc.kind} ${doc.metadata.name} is also in ${seen.where}: one namespace holds one`);
    else byName.set(doc.metadata.name, {doc, where});
  }
  const maps = new Map([...configMaps].map(([name, m]) => [name, m.doc]));
  for (const {doc, where} of docs) {
    const named = `${where} (${doc.kind} ${doc.metadata && doc.metadata.name})`;
    const found = schemaErrors(doc, named);
    errors.push(...found);
    if (found.length) continue;
    const resolved = [];
    for (const t of podTemplates(doc, named)) {
      try {
        resolved.push({t, r: effectiveJob(t.pod, maps, spotvisor, t.where)});
      } catch (e) {
        errors.push(e.message);
      }
    }
    // The pods of one document that run one job file are one group (coordination.nodes).
    const groups = new Map();
    for (const {t, r} of resolved) groups.set(r.jobFile, (groups.get(r.jobFile) || 0) + t.pods);
    for (const {t, r} of resolved) errors.push(...contractErrors(t, r, groups.get(r.jobFile), pvcs));
  }
  for (const e of errors) console.error(`invalid: ${e}`);
  if (errors.length) process.exit(1);
  console.log(`valid: ${docs.length} documents in ${files.length} files`);
}

main();
