//! `ipam-operator plan`: what `run` with the same flags would do first, for
//! the switch from Cilium's operator and for any change of settings. It
//! loads the provider module as `run` does, lists the CiliumNodes and the
//! pending pods, and runs the engine's pass over a dry-run cloud: the cloud
//! is only read, the cluster only listed. The report goes to stdout (text,
//! or JSON with `--output json`); logs go to stderr.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, ValueEnum};
use ipam_cloud::CloudApi;
use ipam_clouds::Cloud;
use ipam_engine::{plan_cluster, Metrics, PlanSettings};
use ipam_health_http::startup::Startup;
use ipam_k8s::snapshot::read_cluster;

use super::ipam_mode::ipam_mode;
use super::provider::trust_roots;
use super::run::RunArgs;
use super::start::{kube_client, provider};
use crate::plan_report::PlanReport;
use crate::rate_flags::{rate_limits, rate_settings};
use crate::startup::StartStep;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PlanOutput {
    /// For people.
    Text,
    /// One JSON object, for tools and tests.
    Json,
}

#[derive(Args, Debug)]
pub struct PlanArgs {
    /// How the plan is printed on stdout.
    #[arg(long, env = "IPAM_PLAN_OUTPUT", value_enum, default_value_t = PlanOutput::Text)]
    pub output: PlanOutput,
    /// `run`'s own flags: the plan is for these.
    #[command(flatten)]
    pub run: RunArgs,
}

pub async fn run(args: PlanArgs) -> anyhow::Result<ExitCode> {
    let run = &args.run;
    let ipam_mode = ipam_mode(Cloud::from(run.cloud), run.ipam_mode)?;
    let trust = trust_roots(run.egress_ca_file.as_deref())?;
    let rate = rate_settings(&run.rate_buckets, run.rate_global_cap)?;
    let registries = run.registry.access(trust.clone())?;
    // The start-up steps are `run`'s; nobody reads them here.
    let startup = Startup::<StartStep>::default();
    let metrics = Arc::new(Metrics::new());
    let cloud = provider(run, &trust, &registries, &rate, &metrics, &startup).await?;
    let limits = rate_limits(cloud.info(), &rate)?;
    let client = kube_client(run.kubeconfig.as_deref()).await?;
    let snapshot = read_cluster(client).await.context("reading the cluster")?;
    let settings = PlanSettings {
        maintenance: run.maintenance_settings(ipam_mode),
        gc_grace: Duration::from_secs(run.gc_grace_seconds),
        reuse_cooldown: Duration::from_secs(run.reuse_cooldown_seconds),
    };
    let plan = plan_cluster(
        cloud,
        snapshot.nodes,
        &snapshot.pending_pods,
        settings.clone(),
    )
    .await
    .context("planning")?;
    let report = PlanReport {
        plan: &plan,
        settings: &settings,
        unreadable: &snapshot.unreadable,
        limits: &limits,
    };
    match args.output {
        PlanOutput::Text => print!("{}", report.text()),
        PlanOutput::Json => println!("{}", serde_json::to_string_pretty(&report.json())?),
    }
    Ok(ExitCode::SUCCESS)
}
