#!/usr/bin/env python3
"""The release test: runs release/release.sh, as a maintainer would, on a
clean clone of this commit against a registry on loopback (Debian's
docker-registry), then checks what it published, each check by name:
independently of the code that published it (release/verify-release.py:
the distribution API, Python's cryptography for the cosign signatures, the
referrers tag schema for the SBOMs), the tag and its pinned deploy/ and
chart (kustomize and Helm render and install the published digest and
nothing else), the krew manifest and its archives; the arm64 binary under
Debian's qemu-user; and the amd64 image with podman as the DaemonSet runs
it: read-only root, every capability dropped but the init container's two,
no new privileges, no network, nothing in it but the binary and the CA
certificates. Last, the images built again give the same index digest.

    release/test-release.py                  the whole test
    release/test-release.py --prepare        only the clone and its images
    release/test-release.py --prepare-amd64  only the clone and its amd64 image

The clone lives in target/release-test/checkout (its builds kept between
runs), under a lock. `--prepare` makes the clone and builds its images:
CI runs it early in the background, the node suite and the test then find
them built. The node suite runs one architecture, and no build may run
beside it (its episodes read the machine's memory): it holds the lock
`node` while it runs and asks for amd64 alone (`--prepare-amd64`), and
`--prepare` builds amd64 first, then both only while no node suite runs.
Installs what it needs from Debian's packages when missing (podman runs
here only with runc: crun refuses this kernel's hybrid cgroups).
"""

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import pathlib
import re
import select
import subprocess
import sys
import tarfile
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
STATE = ROOT / "target/release-test"
CHECKOUT = STATE / "checkout"
ARCHES = ("amd64", "arm64")
PACKAGES = "buildah podman runc musl-tools binutils curl qemu-user-static python3-cryptography openssl"
# The release test checks what release.sh does, not how fast the binary
# runs: its builds skip the release profile's whole-program optimisation
# (fat LTO, one codegen unit, opt-level 3: about 29 CPU-minutes per
# architecture cold, 12 of them on one core for the last crate) for
# opt-level 1 in 16 units (13.5 CPU-minutes, measured). Everything else —
# the targets, static linking, the built-in policies (their own profile),
# reproducibility, signatures, pins — is what a release does.
PROFILE = {
    "CARGO_PROFILE_RELEASE_LTO": "off",
    "CARGO_PROFILE_RELEASE_CODEGEN_UNITS": "16",
    "CARGO_PROFILE_RELEASE_OPT_LEVEL": "1",
}
PODMAN_RUN = [
    "run", "--rm", "--runtime", "runc", "--read-only", "--cap-drop", "ALL",
    "--security-opt", "no-new-privileges", "--network", "none",
    "--ulimit", "nofile=1024:20000", "--ulimit", "nproc=4096:4096",
]


class Failed(Exception):
    """A check that did not hold, and why."""


def run(*args, cwd=ROOT, ok=True, stdin=None):
    """Runs ARGS; answers its standard output. Unless `ok` is False, a
    failure is Failed with everything it printed."""
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, input=stdin, capture_output=True, text=True, check=False
    )
    if ok and done.returncode != 0:
        raise Failed(f"{' '.join(map(str, args))} failed:\n{done.stdout}{done.stderr}")
    return done.stdout if ok else done


def say(text):
    print(text, file=sys.stderr, flush=True)


def build(*args, cwd=ROOT):
    """Runs a build step, its progress on stderr as it goes (CI's timing
    table reads when a background build last wrote its log)."""
    say(f"== {' '.join(map(str, args))}")
    done = subprocess.run([str(a) for a in args], cwd=cwd, stdout=sys.stderr, check=False)
    if done.returncode != 0:
        raise Failed(f"{' '.join(map(str, args))} failed (exit {done.returncode}): its output is above")


@contextlib.contextmanager
def locked(name):
    """Holds target/release-test/NAME.lock while the block runs."""
    STATE.mkdir(parents=True, exist_ok=True)
    with open(STATE / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def install():
    """What the test runs, from Debian's packages, with the project's own
    function (its progress on stderr)."""
    script = (
        "source examples/policies/toolchain/toolchain.sh && "
        f"need_debian_packages {PACKAGES} && need_registry_tools"
    )
    subprocess.run(["bash", "-c", script], cwd=ROOT, stdout=sys.stderr, check=True)


@dataclasses.dataclass
class Clone:
    """The clone released: this commit (not the working tree's changes),
    and over it the maintainer's last step, the version's section in
    CHANGELOG.md dated; a commit made at this commit's time, so the same
    every run (its builds stay fresh: a build embeds the commit)."""

    version: str
    epoch: int
    released: str

    @classmethod
    def prepare(cls):
        version = run("release/version.sh").strip()
        head = run("git", "rev-parse", "HEAD").strip()
        epoch = int(run("git", "log", "-1", "--format=%ct", "HEAD"))
        for who in ("AUTHOR", "COMMITTER"):
            os.environ[f"GIT_{who}_NAME"] = "release-test"
            os.environ[f"GIT_{who}_EMAIL"] = "release-test@localhost"
            os.environ[f"GIT_{who}_DATE"] = f"@{epoch}"
        git = ("git", "-C", CHECKOUT)
        if not (CHECKOUT / ".git").is_dir():
            run("git", "clone", "-q", "--no-checkout", ROOT, CHECKOUT)
        parent = run(*git, "rev-parse", "-q", "--verify", "HEAD^", ok=False).stdout.strip()
        if parent != head:
            run(*git, "fetch", "-q", ROOT, "HEAD")
            run(*git, "checkout", "-q", "--force", "--detach", "FETCH_HEAD")
            day = time.strftime("%Y-%m-%d", time.gmtime(epoch))
            changelog = CHECKOUT / "CHANGELOG.md"
            text = changelog.read_text()
            text = text.replace(f"## Unreleased ({version})\n", f"## [{version}] - {day}\n", 1)
            changelog.write_text(text)
            run(*git, "commit", "-qam", f"Changelog: {version}")
        run(*git, "checkout", "-q", "--", ".")
        run(*git, "clean", "-fdq")
        tags = run(*git, "tag", "-l").split()
        if tags:
            run(*git, "tag", "-d", *tags)
        # The toolchains (deploy/check.sh's venv) are shared; Go's build
        # cache makes the clone's own kubectl and Helm a link each.
        (ROOT / "target/toolchains").mkdir(parents=True, exist_ok=True)
        (CHECKOUT / "target").mkdir(exist_ok=True)
        link = CHECKOUT / "target/toolchains"
        if not link.is_symlink():
            link.symlink_to(ROOT / "target/toolchains")
        return cls(version, epoch, run(*git, "rev-parse", "HEAD").strip())


def build_images(arch="all"):
    """ARCH's image, or both architectures' in one index (target/image/)."""
    build("release/image.sh", "--arch", arch, cwd=CHECKOUT)


@dataclasses.dataclass
class Release:
    """What the checks share: the clone, the work directory, the registry
    on loopback and its keys, and what was published."""

    clone: Clone
    work: pathlib.Path
    registry: str
    digest: str = ""

    @property
    def pin(self):
        return f"{self.registry}/vigil@{self.digest}"

    @property
    def out(self):
        return CHECKOUT / "target/dist"

    @property
    def short(self):
        return run("git", "-C", CHECKOUT, "rev-parse", "--short=12", self.clone.released).strip()

    def release(self, *args, ok=True):
        """release.sh ARGS in the clone, signing with the test's key."""
        return run(
            "release/release.sh", *args, "--key", self.work / "cosign.key", "--insecure",
            "--download-url", f"http://downloads.invalid/v{self.clone.version}",
            cwd=CHECKOUT, ok=ok,
        )

    def podman(self, *args, ok=True):
        storage = ["--storage-driver", "vfs", "--root", self.work / "podman/root"]
        return run("podman", *storage, "--runroot", self.work / "podman/run", *args, ok=ok)

    def in_image(self, *args, ok=True):
        """The amd64 image run as the DaemonSet runs it, with ARGS before
        the image and after it, split at "--"."""
        at = args.index("--")
        return self.podman(*PODMAN_RUN, *args[:at], self.pin, *args[at + 1 :], ok=ok)


CHECKS = []


def check(function):
    """A check of the release, run in the order written."""
    CHECKS.append(function)
    return function


def refused(r, why, *args):
    said = r.release(*args, ok=False)
    if said.returncode == 0:
        raise Failed(f"release.sh {' '.join(args)} did not refuse ({why})")
    if why not in said.stdout + said.stderr:
        raise Failed(f"release.sh {' '.join(args)} refused with: {said.stderr} (not: {why})")


@check
def refuses_a_version_without_its_changelog_section(r):
    refused(r, "CHANGELOG.md has no section for 9.9.9", "9.9.9", f"{r.registry}/vigil")


@check
def refuses_a_version_that_is_not_the_workspaces(r):
    with open(CHECKOUT / "CHANGELOG.md", "a") as changelog:
        changelog.write("## [9.9.9] - 2026-01-01\n")
    why = f"the workspace's version is {r.clone.version}, not 9.9.9"
    refused(r, why, "9.9.9", f"{r.registry}/vigil")


@check
def refuses_a_tree_that_is_not_clean(r):
    refused(r, "the tree is not clean", r.clone.version, f"{r.registry}/vigil")
    run("git", "-C", CHECKOUT, "checkout", "-q", "--", "CHANGELOG.md")


@check
def releases_and_leaves_the_branch_where_it_was(r):
    r.release(r.clone.version, f"{r.registry}/vigil")
    head = run("git", "-C", CHECKOUT, "rev-parse", "HEAD").strip()
    if head != r.clone.released:
        raise Failed(f"release.sh moved HEAD to {head}")


@check
def refuses_a_version_already_tagged(r):
    refused(r, f"the tag v{r.clone.version} exists", r.clone.version, f"{r.registry}/vigil")


@check
def the_registry_holds_the_signed_index_its_sboms_and_the_signed_chart(r):
    r.digest = run(
        "python3", "release/verify-release.py", r.registry, "vigil", r.clone.version,
        r.work / "cosign.pub", f"{r.registry}/charts", r.out,
    ).strip()
    say(f"published {r.pin}")


@check
def vigil_verifies_the_index_under_its_key_and_no_other(r):
    vigil = CHECKOUT / "target/x86_64-unknown-linux-musl/release/vigil"
    run(vigil, "policy", "verify", r.pin, "--key", r.work / "cosign.pub", "--insecure")
    other = run(vigil, "policy", "verify", r.pin, "--key", r.work / "other.pub", "--insecure", ok=False)
    if other.returncode == 0:
        raise Failed("vigil policy verify accepted the index under another key")


@check
def the_tag_is_annotated_one_commit_over_the_release(r):
    tag = f"v{r.clone.version}"
    if run("git", "-C", CHECKOUT, "cat-file", "-t", tag).strip() != "tag":
        raise Failed(f"{tag} is not an annotated tag")
    parent = run("git", "-C", CHECKOUT, "rev-parse", f"{tag}^{{commit}}^").strip()
    if parent != r.clone.released:
        raise Failed(f"{tag} is not one commit over {r.clone.released}")
    # What the tag pins, for the checks that render and install it.
    archive = r.work / "tagged.tar"
    run("git", "-C", CHECKOUT, "archive", "--output", archive, tag, "deploy")
    with tarfile.open(archive) as tagged:
        tagged.extractall(r.work / "tagged", filter="data")


def images(manifests):
    """The images `manifests` (rendered YAML) run, each once."""
    return sorted(set(re.findall(r"image: \"?([^\"\s]+)", manifests)))


def kubectl(*args):
    return run(ROOT / "target/vigil-cluster/vigil-cluster", "kubectl", *args)


@check
def the_tags_deploy_renders_the_published_image_and_no_other(r):
    for render in ("deploy", "deploy/cleanup"):
        rendered = images(kubectl("kustomize", r.work / "tagged" / render))
        if rendered != [r.pin]:
            raise Failed(f"{render} at v{r.clone.version} runs {rendered}, not {r.pin}")


@check
def the_published_chart_renders_the_published_image_and_no_other(r):
    helm = ROOT / "target/tools/helm"
    version = r.clone.version
    run(helm, "pull", f"oci://{r.registry}/charts/vigil", "--version", version,
        "--plain-http", "--destination", r.work)
    with tarfile.open(r.work / f"vigil-{version}.tgz") as chart:
        chart.extractall(r.work, filter="data")
    rendered = images(run(helm, "template", "vigil", r.work / "vigil", "--kube-version", "1.37.0"))
    if rendered != [r.pin]:
        raise Failed(f"the published chart runs {rendered}")


@contextlib.contextmanager
def control_plane(work):
    """The upstream control plane, up until the block ends (its input
    closed); its kubeconfig."""
    with open(work / "cluster.err", "w+") as err:
        cluster = ROOT / "target/vigil-cluster/vigil-cluster"
        up = [cluster, "up", work / "cluster"]
        with subprocess.Popen(up, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err) as plane:
            ready, _, _ = select.select([plane.stdout], [], [], 300)
            if not ready or not plane.stdout.readline():
                err.seek(0)
                raise Failed(f"the control plane did not start:\n{err.read()}")
            try:
                yield work / "cluster/admin.conf"
            finally:
                plane.stdin.close()
                plane.wait(timeout=300)


@check
def kustomize_and_helm_install_the_published_image(r):
    helm = ROOT / "target/tools/helm"
    image = ("-n", "vigil-system", "get", "daemonset", "vigil", "-o",
             "jsonpath={.spec.template.spec.containers[0].image}")
    with control_plane(r.work) as kubeconfig:
        os.environ["KUBECONFIG"] = str(kubeconfig)
        kubectl("apply", "--server-side", "-k", r.work / "tagged/deploy")
        if kubectl(*image) != r.pin:
            raise Failed(f"kustomize installed {kubectl(*image)}")
        kubectl("delete", "-k", r.work / "tagged/deploy", "--wait", "--timeout", "300s")
        run(helm, "install", "vigil", f"oci://{r.registry}/charts/vigil", "--version",
            r.clone.version, "--plain-http", "--namespace", "default", "--wait=false")
        if kubectl(*image) != r.pin:
            raise Failed(f"Helm installed {kubectl(*image)}")
        run(helm, "uninstall", "vigil", "--namespace", "default")


@check
def the_krew_manifest_names_the_plugins_archives_by_their_sums(r):
    version = r.clone.version
    manifest = (r.out / "vigil.krew.yaml").read_text()
    if f"version: v{version}" not in manifest:
        raise Failed(f"the krew manifest is not v{version}:\n{manifest}")
    pairs = re.findall(r"uri: \S+/(vigil-[^/\s]+\.tar\.gz)\n\s+sha256: ([0-9a-f]{64})", manifest)
    named = sorted(name for name, _ in pairs)
    if named != [f"vigil-{version}-linux-{arch}.tar.gz" for arch in ARCHES]:
        raise Failed(f"the krew manifest names {named}")
    for name, sha in pairs:
        if hashlib.sha256((r.out / name).read_bytes()).hexdigest() != sha:
            raise Failed(f"{name} is not the archive its sum names")
        with tarfile.open(r.out / name) as archive:
            if sorted(archive.getnames()) != ["LICENSE", "kubectl-vigil"]:
                raise Failed(f"{name} holds {archive.getnames()}")


@check
def the_plugin_says_its_version(r):
    with tarfile.open(r.out / f"vigil-{r.clone.version}-linux-amd64.tar.gz") as archive:
        archive.extract("kubectl-vigil", r.work, filter="data")
    said = run(r.work / "kubectl-vigil", "version", "--client")
    if f"vigil {r.clone.version}" not in said:
        raise Failed(f"kubectl-vigil version --client: {said}")


def says_its_version(r, said, where):
    if not said.startswith(f"vigil {r.clone.version} ({r.short}) wasmtime "):
        raise Failed(f"{where} --version: {said} (not vigil {r.clone.version} at {r.short})")


def builtins_pass(said, where):
    if sum(line.endswith(": ok") for line in said.splitlines()) < 3:
        raise Failed(f"{where} policy check --builtin: {said}")


@check
def the_arm64_binary_runs_under_qemu_and_compiles_the_builtins(r):
    arm64 = r.out / "vigil-arm64"
    arm64.chmod(0o755)
    says_its_version(r, run("qemu-aarch64-static", arm64, "--version"), "arm64")
    cache = r.work / "arm64-cache"
    builtins_pass(run("qemu-aarch64-static", arm64, "policy", "check", "--builtin", "--cache-dir", cache), "arm64")


@check
def the_image_says_its_version_and_commit(r):
    r.podman("pull", "--quiet", "--tls-verify=false", r.pin)
    said = r.in_image("--", "--version")
    say(said.strip())
    says_its_version(r, said, "the image's")


@check
def the_image_runs_as_its_own_user_and_names_its_source(r):
    user = r.podman("image", "inspect", "--format", "{{.Config.User}}", r.pin).strip()
    if user != "65532:65532":
        raise Failed(f"the image runs as '{user}', not 65532:65532")
    labels = json.loads(r.podman("image", "inspect", "--format", "{{json .Labels}}", r.pin))
    wanted = {
        "version": r.clone.version,
        "revision": r.clone.released,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(r.clone.epoch)),
        "licenses": "Apache-2.0",
    }
    for name, value in wanted.items():
        if labels.get(f"org.opencontainers.image.{name}") != value:
            raise Failed(f"label {name} is {labels.get(f'org.opencontainers.image.{name}')}, not {value}")
    if not labels.get("org.opencontainers.image.source"):
        raise Failed(f"no source label: {labels}")


@check
def the_agent_in_the_image_takes_its_node_name(r):
    if "--node-name" not in r.in_image("--", "agent", "--help"):
        raise Failed("agent --help does not name --node-name")


@check
def the_builtins_load_in_the_image_with_nothing_writable_but_a_tmpfs(r):
    # wasmtime runs only code compiled for the binary's own triple (musl).
    said = r.in_image("--user", "65532:65532", "--tmpfs", "/tmp", "--",
                      "policy", "check", "--builtin", "--cache-dir", "/tmp/cache")
    builtins_pass(said, "the image's")


@check
def own_state_hands_a_root_left_state_to_the_agents_user(r):
    # As the DaemonSet's init container runs: root with CHOWN and
    # DAC_READ_SEARCH only.
    config = r.work / "state/config"
    config.mkdir(parents=True)
    (config / "checkpoint.json").write_text("{}\n")
    config.chmod(0o700)
    r.in_image("--user", "0", "--cap-add", "CHOWN", "--cap-add", "DAC_READ_SEARCH",
               "-v", f"{r.work / 'state'}:/var/lib/vigil", "--", "own-state")
    owners = {f"{p.stat().st_uid}:{p.stat().st_gid}" for p in [r.work / "state", *(r.work / "state").rglob("*")]}
    if owners != {"65532:65532"}:
        raise Failed(f"own-state in the image left owners {sorted(owners)}")


@check
def the_image_has_no_shell(r):
    shell = r.in_image("--entrypoint", "/bin/sh", "--", "-c", "true", ok=False)
    if shell.returncode == 0:
        raise Failed("the image has a shell")


@check
def the_image_holds_the_binary_and_the_certificates_only(r):
    container = r.podman("create", "--runtime", "runc", r.pin).strip()
    exported = r.work / "image.tar"
    r.podman("export", "--output", exported, container)
    r.podman("rm", container)
    with tarfile.open(exported) as image:
        names = {n.rstrip("/") for n in image.getnames()}
    runtime = re.compile(r"^(dev|proc|sys|run)(/|$)|^etc/(hosts|hostname|resolv\.conf)$")
    held = sorted(n for n in names if not runtime.match(n))
    wanted = ["etc", "etc/ssl", "etc/ssl/certs", "etc/ssl/certs/ca-certificates.crt", "vigil"]
    if held != wanted:
        raise Failed(f"the image holds more than the binary and the certificates: {held}")


@check
def a_second_build_gives_the_same_index(r):
    # The binaries from cargo's cache: nothing in the index depends on
    # when it was made.
    run("release/image.sh", "--arch", "all", cwd=CHECKOUT)
    again = (CHECKOUT / "target/image/digest").read_text().strip()
    if again != r.digest:
        raise Failed(f"a second build of the images gave {again}, not {r.digest}")


@contextlib.contextmanager
def loopback_registry(work):
    """Debian's docker-registry, on loopback only (the packaged config
    listens on every interface); its address."""
    config = work / "registry.yml"
    config.write_text(
        "version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n"
        f"    rootdirectory: {work / 'registry'}\nhttp:\n  addr: 127.0.0.1:0\n"
    )
    log = work / "registry.log"
    with open(log, "w") as out:
        server = subprocess.Popen(["docker-registry", "serve", config], stdout=out, stderr=out)
    try:
        for _ in range(100):
            found = re.search(r'msg="listening on ([^"]*)"', log.read_text())
            if found:
                break
            if server.poll() is not None:
                raise Failed(f"the registry did not start:\n{log.read_text()}")
            time.sleep(0.1)
        else:
            raise Failed(f"the registry did not start:\n{log.read_text()}")
        yield found.group(1)
    finally:
        server.kill()
        server.wait()


def keys(work):
    """The release's signing key pair, and another public key."""
    def pair(name):
        run("openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
            "-out", work / f"{name}.key")
        run("openssl", "pkey", "-in", work / f"{name}.key", "-pubout", "-out", work / f"{name}.pub")

    pair("cosign")
    pair("other")


def test(clone):
    """Every check, in order; answers the published pin."""
    build("tests/cluster/build.sh")
    build("release/tools/build.sh")
    with tempfile.TemporaryDirectory() as work, loopback_registry(pathlib.Path(work)) as registry:
        r = Release(clone, pathlib.Path(work), registry)
        keys(r.work)
        for each in CHECKS:
            try:
                each(r)
            except Failed as failed:
                say(f"FAILED {each.__name__}: {failed}")
                sys.exit(1)
            say(f"ok     {each.__name__}")
        return r.pin


def prepare(arch):
    """The clone, and ARCH's images in it."""
    with locked("clone"):
        Clone.prepare()
        build_images(arch)


def main(args):
    os.environ.update(PROFILE)
    install()
    if args not in ([], ["--prepare"], ["--prepare-amd64"]):
        sys.exit(f"usage: {sys.argv[0]} [--prepare | --prepare-amd64]")
    if args:
        prepare("amd64")
        if args == ["--prepare"]:
            with locked("node"):
                prepare("all")
        return
    with locked("clone"):
        clone = Clone.prepare()
        build_images()
        pin = test(clone)
    print(f"release test passed: {pin}")


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except Failed as failed:
        sys.exit(f"release test: {failed}")
