//! What the status objects should say: the node's report from the config
//! controller's account and the loop's [`Activity`], each policy's from the
//! registry; and whether an object already says it.

use super::activity::{Activity, time};
use super::kinds::{
    ConfigState, Fault, Mode, NodeView, PolicyView, PressureCondition, PullView, ShadowView,
};
use crate::base::build::BUILD;
use crate::cluster::node_status::condition_type;
use crate::config::assignment::ConfigView;
use crate::policy::{Incident, Origin, Phase, PolicyStatus, RefusedVersion, Registry};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use std::collections::BTreeMap;

/// The node's report.
pub(crate) fn node(config: &ConfigView, activity: &Activity) -> NodeView {
    NodeView {
        agent: Some(BUILD.to_owned()),
        mode: Some(Mode::of(!config.paused_by.is_empty(), config.observing)),
        config: ConfigState {
            state: config.status.reason.as_str().to_owned(),
            message: config.status.message.clone(),
            assigned: config.assigned.clone(),
            active: config.active.clone(),
            last_known_good: config.last_known_good.clone(),
            trial_end: config.trial_end.map(|end| time(end.into())),
            last_error: config.last_error.clone(),
        },
        conditions: activity
            .conditions
            .iter()
            .map(|c| PressureCondition {
                type_: condition_type(&c.type_),
                since: c.since.clone(),
            })
            .collect(),
        beside_kubelet: activity.beside_kubelet.clone(),
        last_evictions: activity.last_evictions.iter().cloned().collect(),
        last_eviction_time: activity.last_evictions.back().map(|e| e.time.clone()),
        evictions: activity.evictions.clone(),
        // The publisher's own record.
        policies: None,
    }
}

/// Every policy's report, by name: those that serve, those whose
/// only version was refused, and those whose registry version could not be
/// pulled yet; each with how its pull fares (`pulls`) and its version in
/// shadow (`shadows`).
pub(crate) fn policies(
    registry: &Registry,
    pulls: &BTreeMap<String, PullView>,
    shadows: &BTreeMap<String, ShadowView>,
) -> BTreeMap<String, PolicyView> {
    let faults: BTreeMap<String, u64> = registry
        .serving()
        .iter()
        .map(|p| (p.name().to_owned(), p.faults()))
        .collect();
    let mut reports: BTreeMap<String, PolicyView> = registry
        .status()
        .into_iter()
        .map(|status| {
            let faults = faults.get(&status.name).copied().unwrap_or_default();
            let report = serving(&status, faults);
            (status.name, report)
        })
        .collect();
    for (name, refusal) in registry.refused_unserved() {
        let mut report = unserved("Failed", time(refusal.incident.at));
        report.last_fault = Some(refused(&refusal));
        reports.insert(name, report);
    }
    for (name, pull) in pulls {
        let report = reports
            .entry(name.clone())
            .or_insert_with(|| unserved(&pull.state, pull.since.clone()));
        report.pull = Some(pull.clone());
    }
    for (name, shadow) in shadows {
        let report = reports
            .entry(name.clone())
            .or_insert_with(|| unserved("Unserved", shadow.since.clone()));
        report.shadow = Some(shadow.clone());
    }
    reports
}

/// The report of a policy no version of which serves, in `state` since `since`.
fn unserved(state: &str, since: Time) -> PolicyView {
    PolicyView {
        state: state.into(),
        since,
        world: None,
        digest: None,
        version: None,
        source: None,
        trial_end: None,
        last_known_good: None,
        last_fault: None,
        faults: 0,
        pull: None,
        shadow: None,
    }
}

fn serving(status: &PolicyStatus, faults: u64) -> PolicyView {
    let (state, since) = match (&status.refused, &status.phase) {
        (Some(refusal), _) => ("Failed", refusal.incident.at),
        (None, Phase::Trial { .. }) => ("Trial", status.since),
        (None, Phase::Active) => ("Active", status.since),
        (None, Phase::RolledBack { .. }) => ("RolledBack", status.since),
    };
    let source = match status.source {
        Origin::Builtin => "builtin",
        Origin::File(_) => "file",
        Origin::LastKnownGood(_) => "last-known-good",
    };
    let last_fault = match (&status.refused, &status.last_fault) {
        (Some(refusal), Some(fault)) if fault.at > refusal.incident.at => Some(incident(fault)),
        (Some(refusal), _) => Some(refused(refusal)),
        (None, fault) => fault.as_ref().map(incident),
    };
    PolicyView {
        state: state.into(),
        since: time(since),
        world: Some(status.world.name().to_owned()),
        digest: Some(status.digest.hex()),
        version: Some(status.digest.to_string()),
        source: Some(source.into()),
        trial_end: match status.phase {
            Phase::Trial { until } => Some(time(until)),
            Phase::Active | Phase::RolledBack { .. } => None,
        },
        last_known_good: status.last_known_good.map(|d| d.hex()),
        last_fault,
        faults,
        pull: None,
        shadow: None,
    }
}

fn incident(incident: &Incident) -> Fault {
    Fault {
        time: time(incident.at),
        message: crate::base::text::bounded(&incident.message, 1024),
    }
}

fn refused(refusal: &RefusedVersion) -> Fault {
    let what = match refusal.digest {
        Some(digest) => format!("version {digest} refused"),
        None => "the policy file refused".to_owned(),
    };
    incident(&Incident {
        at: refusal.incident.at,
        message: format!("{what}: {}", refusal.incident.message),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    fn report(faults: u64) -> PolicyView {
        PolicyView {
            state: "Active".into(),
            since: time(SystemTime::UNIX_EPOCH),
            world: Some("candidate-sorter".into()),
            digest: None,
            version: None,
            source: Some("builtin".into()),
            trial_end: None,
            last_known_good: None,
            last_fault: None,
            faults,
            pull: None,
            shadow: None,
        }
    }

    /// What is written must read back equal, or every sync would write again.
    #[test]
    fn a_report_reads_back_as_written() {
        use crate::config::assignment::{Reason, Status};
        use crate::eviction::{ActiveCondition, Settled};
        let odd = SystemTime::UNIX_EPOCH + Duration::from_nanos(1_795_432_319_561_266_683);
        let config = ConfigView {
            status: Status {
                reason: Reason::Trial,
                message: "on trial".into(),
            },
            assigned: Some("ab".into()),
            active: Some("ab".into()),
            last_known_good: None,
            trial_end: Some(jiff::Timestamp::try_from(odd).unwrap()),
            last_error: None,
            observing: true,
            paused_by: Vec::new(),
        };
        let mut activity = Activity::default();
        let condition = ActiveCondition {
            name: "MemoryPressure".into(),
            effects: Vec::new(),
            last_observed: odd,
        };
        activity.conditions(&[condition], odd);
        let victim = super::super::activity::tests::victim("big");
        activity.settled(&Settled::Refused(victim, "budget".into()), odd);
        let written = node(&config, &activity);
        let read: NodeView =
            serde_json::from_value(serde_json::to_value(&written).unwrap()).unwrap();
        assert_eq!(read, written);

        let mut policy = report(1);
        policy.since = time(odd);
        policy.trial_end = Some(time(odd));
        let read: PolicyView =
            serde_json::from_value(serde_json::to_value(&policy).unwrap()).unwrap();
        assert_eq!(read, policy);
    }
}
