//! The queue drives the cluster's autoscaler, end to end against the in-process API
//! server with the controller's own loop: a waiting 2 × 8 gang in a scalable pool makes
//! two whole-node placeholder pods and nothing else; when the nodes come (and the
//! placeholders are bound there, as kube-scheduler would) the gang is placed on them, the
//! placeholders go and the nodes are marked kept; a spot notice taint on a node
//! checkpoints and requeues the job running there within the pool's notice.

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code"
)]

mod apiserver;
mod objects;

use apiserver::{FakeApi, Kind};
use cluster::watch::Live;
use objects::{gang_member as member, gpu_node as node};
use serde_json::{json, Value};
use serve::state::{AppState, ClusterOptions};
use std::sync::Arc;
use std::time::{Duration, Instant};

const NOW: i64 = 1_795_510_000;
const POLICY: &str = r#"
use std.nodes.{dgx_h100}
use std.tiers
pool base { capacity = reserved; node = dgx_h100; nodes = 1 }
pool spot { capacity = spot; node = dgx_h100; nodes = 0..4; cost = 40 $/h; boot = 3m; notice = 2m }
placement { gang = all_or_nothing; gang_timeout = 30m }
team alpha { guaranteed = 8 gpu in base; burst = 64 gpu }
autoscale spot {
  up when pending_nodes(fits = spot) > 0 => add pending_nodes(fits = spot)
  down when idle > 10m
}
"#;

async fn until(what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(20), "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn placeholders(api: &FakeApi) -> Vec<(String, Value)> {
    api.pods()
        .into_iter()
        .filter(|(k, _)| k.starts_with("gantry-system/"))
        .collect()
}

/// The queue's own loop on `POLICY` against `api`, driving capacity with placeholders or
/// (`provisioning`) ProvisioningRequests.
async fn start(
    api: &std::sync::Arc<FakeApi>,
    provisioning: bool,
) -> Result<(Live, Arc<AppState>), String> {
    let url = api.serve().await;
    let client = kube::Client::try_from(apiserver::config(&url)).unwrap();
    let options = ClusterOptions {
        kubeconfig: None,
        in_cluster: false,
        pool_label: "gantry.dev/pool".into(),
        sync_timeout: Duration::from_secs(10),
        watch_jobs: true,
        placeholder_image: Some(cluster::capacity::PAUSE_IMAGE.into()),
        provisioning_requests: provisioning,
        predict_runtimes: false,
    };
    let live = Live::with_client(client, url, &options).await?;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("policy.gantry"), POLICY).unwrap();
    let state = Arc::new(AppState::new(Box::new(|| NOW)));
    state.reload_policy(dir.path()).unwrap();
    let election = cluster::lease::Election {
        duration: Duration::from_millis(1_500),
        renew: Duration::from_millis(200),
        ..cluster::lease::Election::new("gantry-system", "replica-a")
    };
    live.start_queue_with(state.clone(), election, Duration::from_secs(60));
    Ok((live, state))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_scales_its_pool_through_placeholders_and_a_spot_notice_requeues_it() {
    let api = FakeApi::new();
    api.apply(Kind::Nodes, node("b0", "base"));
    let (_live, state) = start(&api, false).await.unwrap();

    api.apply(Kind::Pods, member("g-0"));
    api.apply(Kind::Pods, member("g-1"));
    until("two placeholders", || placeholders(&api).len() == 2).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let held = placeholders(&api);
    assert_eq!(held.len(), 2, "exactly two, cycle after cycle");
    for (_, p) in &held {
        assert_eq!(p["spec"]["priority"], json!(-1), "{p}");
        assert_eq!(p["spec"]["nodeSelector"]["gantry.dev/pool"], "spot");
        assert_eq!(
            p["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"],
            "8"
        );
    }
    // Besides the waiting reasons, the Lease, the memory and the seal's key: two
    // creations, no node marks.
    let writes: Vec<(String, String)> = api
        .writes()
        .into_iter()
        .filter(|(_, path)| {
            !(path.starts_with("pods/ml/")
                || path.starts_with("events/")
                || path.starts_with("leases/")
                || path.starts_with("configmaps/")
                || path.starts_with("secrets/"))
        })
        .collect();
    assert_eq!(
        writes,
        [
            (
                "POST".to_string(),
                "pods/gantry-system/gantry-placeholder-spot-0".to_string()
            ),
            (
                "POST".to_string(),
                "pods/gantry-system/gantry-placeholder-spot-1".to_string()
            )
        ]
    );
    let metrics = state.metrics.render(None, &Default::default());
    assert!(
        metrics.contains(
            "gantry_pool_placeholder_pods{pool=\"spot\",capacity=\"spot\",state=\"pending\"} 2"
        ),
        "{metrics}"
    );

    // The autoscaler brings two nodes; kube-scheduler binds the placeholders there.
    api.apply(Kind::Nodes, node("s0", "spot"));
    api.apply(Kind::Nodes, node("s1", "spot"));
    for ((key, _), n) in held.iter().zip(["s0", "s1"]) {
        api.update(Kind::Pods, key, |p| p["spec"]["nodeName"] = json!(n));
    }
    until("the gang is released", || {
        ["g-0", "g-1"].iter().all(|m| {
            api.get_object(Kind::Pods, &format!("ml/{m}")).unwrap()["spec"]["schedulingGates"]
                .is_null()
        })
    })
    .await;
    until("the placeholders go", || placeholders(&api).is_empty()).await;
    until("the spot nodes are kept", || {
        ["s0", "s1"].iter().all(|n| {
            api.get_object(Kind::Nodes, n).unwrap()["metadata"]["annotations"]
                ["cluster-autoscaler.kubernetes.io/scale-down-disabled"]
                == "true"
        })
    })
    .await;
    api.bind_released();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(placeholders(&api).is_empty(), "no new request once placed");

    // A spot interruption notice on one of the gang's nodes: the whole gang is marked and
    // evicted with the pool's 2-minute notice as its grace, to be requeued.
    let node_of = |m: &str| {
        api.get_object(Kind::Pods, &format!("ml/{m}")).unwrap()["spec"]["nodeName"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let spot_node = ["g-0", "g-1"]
        .iter()
        .map(|m| node_of(m))
        .find(|n| n.starts_with('s'))
        .unwrap();
    api.update(Kind::Nodes, &spot_node, |n| {
        n["spec"]["taints"] = json!([{"key": "aws-node-termination-handler/spot-itn", "value": "1", "effect": "NoSchedule"}]);
    });
    until("the gang is evicted", || {
        ["g-0", "g-1"].iter().all(|m| {
            api.get_object(Kind::Pods, &format!("ml/{m}"))
                .is_none_or(|p| p["metadata"]["deletionTimestamp"].is_string())
        })
    })
    .await;
    for m in ["g-0", "g-1"] {
        // A member not bound yet when it was evicted is deleted at once: nothing to read.
        let Some(p) = api.get_object(Kind::Pods, &format!("ml/{m}")) else {
            continue;
        };
        assert_eq!(p["metadata"]["deletionGracePeriodSeconds"], 120, "{p}");
        assert!(
            p["metadata"]["annotations"]["gantry.dev/preempted"]
                .as_str()
                .unwrap()
                .starts_with("spot_interrupt"),
            "{p}"
        );
    }
}

/// `--scale-through provisioning-request`: the gang's two nodes are one atomic
/// ProvisioningRequest (with its PodTemplate), not placeholder pods; once provisioned and
/// the nodes are here, it is withdrawn. Without the CRD, the queue does not start and says
/// why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_provisioning_requests_a_gang_asks_for_its_nodes_atomically() {
    let missing = FakeApi::new();
    missing.apply(Kind::Nodes, node("b0", "base"));
    let e = start(&missing, true).await.err().unwrap();
    assert!(
        e.contains("ProvisioningRequest needs cluster-autoscaler"),
        "{e}"
    );

    let api = FakeApi::new();
    api.apply(Kind::Nodes, node("b0", "base"));
    api.serve_provisioning_requests();
    let (_live, _state) = start(&api, true).await.unwrap();
    api.apply(Kind::Pods, member("g-0"));
    api.apply(Kind::Pods, member("g-1"));
    until("a provisioning request", || {
        !api.objects(Kind::ProvisioningRequests).is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let requests = api.objects(Kind::ProvisioningRequests);
    assert_eq!(requests.len(), 1, "{requests:?}");
    let (key, request) = requests.into_iter().next().unwrap();
    assert_eq!(request["spec"]["podSets"][0]["count"], 2);
    assert_eq!(
        request["spec"]["provisioningClassName"],
        "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
    );
    let template = api.get_object(Kind::PodTemplates, &key).unwrap();
    assert_eq!(
        template["template"]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"],
        "8"
    );
    assert!(placeholders(&api).is_empty(), "no placeholder pods");
    // cluster-autoscaler provisions the two nodes.
    api.update(Kind::ProvisioningRequests, &key, |r| {
        r["status"] = json!({"conditions": [{"type": "Provisioned", "status": "True", "reason": "Provisioned",
            "message": "", "lastTransitionTime": "2026-11-24T08:50:00Z"}]});
    });
    api.apply(Kind::Nodes, node("s0", "spot"));
    api.apply(Kind::Nodes, node("s1", "spot"));
    until("the request is withdrawn", || {
        api.objects(Kind::ProvisioningRequests).is_empty()
            && api.objects(Kind::PodTemplates).is_empty()
    })
    .await;
    until("the gang is released", || {
        ["g-0", "g-1"].iter().all(|m| {
            api.get_object(Kind::Pods, &format!("ml/{m}")).unwrap()["spec"]["schedulingGates"]
                .is_null()
        })
    })
    .await;
    let missing_rules = apiserver::rbac::not_allowed(
        &api,
        &apiserver::rbac::example_rules(&[
            "rbac.yaml",
            "rbac-queue.yaml",
            "rbac-provisioning.yaml",
        ]),
    );
    assert!(missing_rules.is_empty(), "{missing_rules:?}");
}
