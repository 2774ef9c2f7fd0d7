//! `ipam-operator provider inspect|conformance`.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Args, Subcommand};
use ipam_cloud::answer::{BadField, RefusalSink};
use ipam_cloud::conformance;
use ipam_cloud::credentials::{Credentials, StaticCredentials};
use ipam_cloud::rate::RateModel;
use ipam_cloud::Operation;
use ipam_provider_runtime::oci::{self, OciReference, RegistryAccess};
use ipam_provider_runtime::{
    default_cache_dir, CallLimits, ProviderConfig, ProviderRuntime, RuntimeConfig, TrustRoots,
};

use super::registry_args::RegistryArgs;
use crate::modules::{resolve_module, search_path};

/// The mock provider's default cloud, used when `mock` runs without --config.
const MOCK_DEFAULT_SETTINGS: &str =
    include_str!("../../../../providers/mock/default-settings.yaml");

#[derive(Subcommand)]
pub enum ProviderCommand {
    /// Show what a module declares: name, version, WIT version, capabilities,
    /// size, imports and exports.
    Inspect {
        /// A .wasm file, the name of a built component (`mock`), or an OCI
        /// reference pinned to a digest (oci://REGISTRY/REPO@sha256:HEX).
        module: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// PEM CA certificates trusted besides the webpki roots, for pulling
        /// an oci:// module from a registry with a private CA.
        #[arg(long, env = "IPAM_EGRESS_CA_FILE", value_name = "FILE")]
        egress_ca_file: Option<PathBuf>,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Run the conformance suite against a module; exits non-zero on a
    /// failure, or on a check of a declared capability that could not run.
    Conformance {
        /// A .wasm file, the name of a built component (`mock`), or an OCI
        /// reference pinned to a digest (oci://REGISTRY/REPO@sha256:HEX).
        module: String,
        #[command(flatten)]
        run: RunArgs,
        #[command(flatten)]
        registry: RegistryArgs,
        /// Pass even if checks of declared capabilities could not run (say,
        /// the cloud has no instance with room for another interface): those
        /// capabilities are then untested, and the summary says so.
        #[arg(long)]
        accept_not_run: bool,
    },
}

#[derive(Args)]
pub struct RunArgs {
    /// The provider's settings (YAML or JSON). Optional for `mock`, which has
    /// an embedded default cloud.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// An origin the provider may reach (scheme://host[:port]); repeatable.
    #[arg(long = "allow-egress", value_name = "ORIGIN")]
    egress: Vec<String>,
    /// PEM CA certificates trusted besides the webpki roots (an endpoint
    /// with a private CA), for the provider's https egress and for pulling an
    /// oci:// module.
    #[arg(long, value_name = "FILE")]
    egress_ca_file: Option<PathBuf>,
    /// Credentials handed to the provider: a YAML or JSON map of strings.
    #[arg(long, value_name = "FILE")]
    credentials: Option<PathBuf>,
    /// Limit of one call, in milliseconds.
    #[arg(long, default_value_t = 30_000)]
    timeout_ms: u64,
    /// Memory cap of one instance, in MiB.
    #[arg(long, default_value_t = 128)]
    memory_mib: usize,
    /// Live host resources (wasi:http fields, requests, bodies, streams,
    /// pollables) one instance may hold.
    #[arg(long, default_value_t = CallLimits::default().host_entries)]
    host_entries: usize,
    /// Bytes those resources may hold (header sets, URLs, buffered bodies),
    /// in MiB.
    #[arg(long, default_value_t = CallLimits::default().host_bytes >> 20)]
    host_mib: usize,
    /// Outgoing requests one instance may have open at once.
    #[arg(long, default_value_t = CallLimits::default().concurrent_requests)]
    concurrent_requests: usize,
    /// Request and response body bytes one call may move, in MiB.
    #[arg(long, default_value_t = CallLimits::default().call_body_bytes >> 20)]
    call_body_mib: u64,
    /// A special address (cloud metadata, link-local; refused by default
    /// whatever the allow-list says) the provider may reach; repeatable.
    #[arg(long = "allow-special-address", value_name = "IP")]
    special_addresses: Vec<IpAddr>,
}

/// Read a YAML or JSON document and give it as JSON text.
fn settings_json(text: &str, origin: &str) -> anyhow::Result<String> {
    ipam_provider_runtime::settings_json(text)
        .with_context(|| format!("{origin}: not YAML or JSON"))
}

fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

fn provider_config(
    module: &str,
    args: &RunArgs,
    trust: TrustRoots,
) -> anyhow::Result<ProviderConfig> {
    load_config(
        module,
        args.config.as_deref(),
        &args.egress,
        trust,
        args.credentials.as_deref(),
        CallLimits {
            timeout: Duration::from_millis(args.timeout_ms),
            memory_bytes: args.memory_mib << 20,
            host_entries: args.host_entries,
            host_bytes: args.host_mib << 20,
            concurrent_requests: args.concurrent_requests,
            call_body_bytes: args.call_body_mib << 20,
        },
    )
    .map(|mut config| {
        config.special_addresses = args.special_addresses.clone();
        config
    })
}

/// The roots every https connection of the operator verifies against: the
/// webpki roots, plus the CAs of `--egress-ca-file` where it is given. One
/// setting for the provider's egress and the host's own calls (OCI pulls,
/// Entra ID and STS tokens), so an endpoint behind a private CA is trusted
/// the same by both.
pub(super) fn trust_roots(egress_ca: Option<&Path>) -> anyhow::Result<TrustRoots> {
    Ok(match egress_ca {
        Some(path) => TrustRoots::with_extra_pem_file(path)?,
        None => TrustRoots::webpki(),
    })
}

/// A provider's configuration from its settings file (YAML or JSON; the
/// mock's embedded default when it has none), egress allow-list, the roots
/// its https egress verifies against, credentials file (a map of strings)
/// and call limits.
pub(super) fn load_config(
    module: &str,
    settings: Option<&Path>,
    egress: &[String],
    trust: TrustRoots,
    credentials: Option<&Path>,
    limits: CallLimits,
) -> anyhow::Result<ProviderConfig> {
    let settings = match settings {
        Some(path) => settings_json(&read(path)?, &path.display().to_string())?,
        None if module == "mock" => settings_json(MOCK_DEFAULT_SETTINGS, "embedded mock settings")?,
        None => anyhow::bail!(
            "provider settings are required for {module} (only `mock` has an embedded default)"
        ),
    };
    let credentials = match credentials {
        Some(path) => {
            let values: BTreeMap<String, String> = serde_yaml::from_str(&read(path)?)
                .with_context(|| format!("{}: not a map of strings", path.display()))?;
            Credentials {
                values,
                expires_at: None,
            }
        }
        None => Credentials::default(),
    };
    let mut config = ProviderConfig::new(settings);
    config.egress = egress.to_vec();
    config.trust = trust;
    config.credentials = Arc::new(StaticCredentials(credentials));
    config.limits = limits;
    Ok(config)
}

/// A module's bytes: a file, a built component's name, or an OCI reference
/// pinned to a digest (`oci://REGISTRY/REPO@sha256:HEX`, pulled into the
/// cache as `registries` says: trust roots, logins, plain-HTTP loopback
/// registries). The path shown for it.
pub(super) async fn module_bytes(
    module: &str,
    registries: &RegistryAccess,
) -> anyhow::Result<(PathBuf, Vec<u8>)> {
    if module.starts_with("oci://") {
        let reference: OciReference = module.parse()?;
        let bytes = oci::pull(&reference, &default_cache_dir().join("modules"), registries)
            .await
            .context("pulling the provider module")?;
        return Ok((PathBuf::from(module), bytes));
    }
    let path = resolve_module(module, &search_path())?;
    let bytes = std::fs::read(&path).with_context(|| {
        format!(
            "reading module {} (built components come from `cargo xtask providers`)",
            path.display()
        )
    })?;
    Ok((path, bytes))
}

pub async fn run(command: ProviderCommand) -> anyhow::Result<ExitCode> {
    let runtime = ProviderRuntime::new(RuntimeConfig::default())?;
    match command {
        ProviderCommand::Inspect {
            module,
            json,
            egress_ca_file,
            registry,
        } => {
            let registries = registry.access(trust_roots(egress_ca_file.as_deref())?)?;
            let (path, bytes) = module_bytes(&module, &registries).await?;
            let (module, info) = runtime
                .describe(&bytes)
                .await
                .with_context(|| format!("{}", path.display()))?;
            let c = info.capabilities;
            let capabilities: Vec<&str> = [
                (c.create_interface, "create-interface"),
                (c.release, "release"),
                (c.prefixes, "prefixes"),
                (c.delete_interface, "delete-interface"),
            ]
            .into_iter()
            .filter_map(|(on, name)| on.then_some(name))
            .collect();
            if json {
                let doc = serde_json::json!({
                    "path": path, "name": info.name, "version": info.version,
                    "wit-version": module.wit_version, "capabilities": capabilities,
                    "max-concurrency": info.max_concurrency, "size": module.size,
                    "rate-model": info.rate_model.as_ref().map(rate_model_json),
                    "sha256": module.digest, "imports": module.imports, "exports": module.exports,
                });
                println!("{}", serde_json::to_string_pretty(&doc)?);
            } else {
                println!("module:          {}", path.display());
                println!("name:            {}", info.name);
                println!("version:         {}", info.version);
                println!("wit version:     ipam:provider@{}", module.wit_version);
                let shown = if capabilities.is_empty() {
                    "none (read-only)".to_string()
                } else {
                    capabilities.join(", ")
                };
                println!("capabilities:    {shown}");
                println!("max concurrency: {}", info.max_concurrency);
                print_rate_model(info.rate_model.as_ref());
                println!("size:            {} bytes", module.size);
                println!("sha256:          {}", module.digest);
                println!("imports:");
                module.imports.iter().for_each(|i| println!("  {i}"));
                println!("exports:");
                module.exports.iter().for_each(|e| println!("  {e}"));
            }
            Ok(ExitCode::SUCCESS)
        }
        ProviderCommand::Conformance {
            module,
            run,
            registry,
            accept_not_run,
        } => {
            let trust = trust_roots(run.egress_ca_file.as_deref())?;
            let (path, bytes) = module_bytes(&module, &registry.access(trust.clone())?).await?;
            let mut config = provider_config(&module, &run, trust)?;
            let refusals = Arc::new(Refusals::default());
            config.refusals = Some(refusals.clone());
            let started = Instant::now();
            let provider = runtime
                .load(&bytes, config)
                .await
                .with_context(|| format!("loading {}", path.display()))?;
            println!(
                "conformance of {} ({}):",
                provider.module().digest,
                path.display()
            );
            let mut report = conformance::run(&provider, &mut |check| println!("{check}")).await;
            let refused = refusals.check();
            println!("{refused}");
            report.checks.push(refused);
            println!(
                "conformance: {} passed, {} failed, {} not applicable, {} not run, in {:.2?}",
                report.passed(),
                report.failed(),
                report.not_applicable(),
                report.not_run(),
                started.elapsed()
            );
            let verdict = verdict(&report, accept_not_run);
            if let Some(note) = verdict.note {
                println!("{note}");
            }
            Ok(if verdict.pass {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
    }
}

/// The answers the runtime refused during a conformance run, each a
/// failure of the contract.
#[derive(Default)]
struct Refusals(Mutex<Vec<String>>);

impl RefusalSink for Refusals {
    fn refused(&self, provider: &str, operation: Operation, bad: &BadField) {
        let mut seen = self.0.lock().unwrap_or_else(|p| p.into_inner());
        seen.push(format!("{provider} answered {operation} with a bad {bad}"));
    }
}

impl Refusals {
    fn check(&self) -> conformance::Check {
        let seen = self.0.lock().unwrap_or_else(|p| p.into_inner());
        conformance::Check {
            name: "no answer refused at the host's boundary checks",
            outcome: if seen.is_empty() {
                conformance::Outcome::Pass
            } else {
                conformance::Outcome::Fail(seen.join("; "))
            },
        }
    }
}

fn rate_model_json(model: &RateModel) -> serde_json::Value {
    serde_json::json!({
        "buckets": model.buckets.iter().map(|b| serde_json::json!({
            "name": b.name, "burst": b.burst, "per-second": b.per_second,
        })).collect::<Vec<_>>(),
        "costs": model.costs.iter().map(|c| serde_json::json!({
            "operation": c.operation.wit_name(),
            "calls": c.calls.iter().map(|call| serde_json::json!({
                "name": call.name, "bucket": call.bucket,
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

fn print_rate_model(model: Option<&RateModel>) {
    let Some(model) = model else {
        println!(
            "rate model:      none declared (WIT 0.1.0): the host keeps one bucket, 4/s, burst 20"
        );
        return;
    };
    println!("rate model:");
    for bucket in &model.buckets {
        println!(
            "  bucket {}: burst {}, {}/s",
            bucket.name, bucket.burst, bucket.per_second
        );
    }
    for cost in &model.costs {
        let calls: Vec<String> = cost
            .calls
            .iter()
            .map(|c| {
                if c.name == c.bucket {
                    c.name.clone()
                } else {
                    format!("{} ({})", c.name, c.bucket)
                }
            })
            .collect();
        println!("  {}: {}", cost.operation, calls.join(" + "));
    }
}

/// Whether a conformance run passes, and what to tell the user about it.
struct Verdict {
    pass: bool,
    note: Option<String>,
}

fn verdict(report: &conformance::Report, accept_not_run: bool) -> Verdict {
    let not_run = report.not_run();
    let note = match (not_run, accept_not_run) {
        (0, _) => None,
        (n, true) => Some(format!(
            "{n} checks of declared capabilities did not run (--accept-not-run): those capabilities are untested"
        )),
        (n, false) => Some(format!(
            "{n} checks of declared capabilities did not run, so those capabilities are untested: give the cloud what they need (see NOT RUN above), or pass --accept-not-run"
        )),
    };
    Verdict {
        pass: report.failed() == 0 && (not_run == 0 || accept_not_run),
        note,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(outcomes: &[conformance::Outcome]) -> conformance::Report {
        conformance::Report {
            provider: "p".into(),
            checks: outcomes
                .iter()
                .map(|outcome| conformance::Check {
                    name: "check",
                    outcome: outcome.clone(),
                })
                .collect(),
        }
    }

    #[test]
    fn a_declared_capability_left_untested_fails_unless_accepted() {
        use conformance::Outcome::*;
        let clean = report(&[Pass, NotApplicable("not declared".into())]);
        assert!(verdict(&clean, false).pass);
        assert!(verdict(&clean, false).note.is_none());
        let untested = report(&[Pass, NotRun("no room".into())]);
        let refused = verdict(&untested, false);
        assert!(!refused.pass);
        assert!(refused.note.unwrap().contains("--accept-not-run"));
        let accepted = verdict(&untested, true);
        assert!(accepted.pass);
        assert!(accepted.note.unwrap().contains("untested"));
        let failed = report(&[Fail("wrong".into()), NotRun("no room".into())]);
        assert!(
            !verdict(&failed, true).pass,
            "accepting does not hide a failure"
        );
    }

    #[test]
    fn an_egress_ca_file_without_a_certificate_stops_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, "not a certificate\n").unwrap();
        let error = trust_roots(Some(&path)).expect_err("refused");
        assert!(
            matches!(
                error.downcast_ref::<ipam_provider_runtime::TrustError>(),
                Some(ipam_provider_runtime::TrustError::Empty { .. })
            ),
            "{error:#}"
        );
        assert!(error.to_string().contains("ca.pem"), "{error:#}");
    }
}
