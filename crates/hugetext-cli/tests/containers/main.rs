//! Containers: programs warmed and run in podman containers, the .deb and
//! the Kubernetes manifests, and the DaemonSet's pod run under podman with
//! the manifest's settings (`bash scripts/test.sh --containers`).

#[path = "../support/k8s.rs"]
mod k8s_support;
#[path = "../support/podman.rs"]
mod podman_support;

mod agent_packaging;
mod containers;
mod daemonset_pod;
