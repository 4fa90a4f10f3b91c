//! `vigil policy …`: the policy author's commands, one file each; the work is
//! [`crate::authoring`]'s.

mod attach;
mod check;
mod compile;
mod new;
mod precompile;
mod push;
mod sign;
mod test;
mod verify;

#[derive(Debug, clap::Subcommand)]
pub(super) enum PolicyCommand {
    /// Validate components against the vigil:policy worlds and describe them.
    Check(check::CheckArgs),
    /// Write a working policy skeleton: source, contract (`wit/`), build
    /// script, a scenario that shows it acting, and a test. Then:
    /// `./build.sh && ./test.sh && vigil simulate scenario.yaml`.
    New(new::NewArgs),
    /// Call one export of a policy on input given as data and print its
    /// answer as JSON: `{"answer": …}`, `{"declined": …}` or `{"fault": "…"}`
    /// (exit status 1). A strategy's `evaluate` is called on `snapshot`, or
    /// its `top-victims` if `top_victims: {scope, n}` is given too; a
    /// sorter's `sort` on `strategies` and `candidates`; a merger's `merge`
    /// on `layers`. Pods and candidates may be written in part (a `name` is
    /// enough; see the policy guide for the defaults). `vigil simulate
    /// --output json --snapshots` writes a `snapshot` in every step.
    Test(test::TestArgs),
    /// Publish a component to an OCI registry in the CNCF Wasm artifact
    /// layout, after the checks of `policy check`, and print the digest to
    /// pin it by (`registry/repository@sha256:…`).
    Push(push::PushArgs),
    /// Compile components for the nodes, so that they never compile: native code for an
    /// explicit CPU baseline, bound to this vigil build, which loads it only when signed by
    /// the agents' --native-code-key.
    Precompile(precompile::PrecompileArgs),
    /// Sign a published artifact (a component or a precompiled one) as `cosign sign --key`
    /// does, with an unencrypted PKCS#8 P-256 key (PEM).
    Sign(sign::SignArgs),
    /// Check that a published artifact (a component, a precompiled one, an image) carries a
    /// cosign signature under a public key, as `cosign verify --key` does.
    Verify(verify::VerifyArgs),
    /// Attach a file to a published artifact as an OCI referrer (its `subject`): vigil's
    /// SBOMs to its images. Listed by the OCI referrers API where the registry has one, and
    /// under the referrers tag schema (`sha256-HEX`) always.
    Attach(attach::AttachArgs),
    /// The agent's child compiler: compiles the component on stdin into the cache.
    #[command(hide = true)]
    Compile(compile::CompileArgs),
}

impl PolicyCommand {
    pub(super) async fn execute(self) -> anyhow::Result<()> {
        match self {
            Self::Check(args) => args.execute(),
            Self::New(args) => args.execute(),
            Self::Test(args) => args.execute(),
            Self::Push(args) => args.execute().await,
            Self::Precompile(args) => args.execute().await,
            Self::Sign(args) => args.execute().await,
            Self::Verify(args) => args.execute().await,
            Self::Attach(args) => args.execute().await,
            Self::Compile(args) => args.execute(),
        }
    }
}
