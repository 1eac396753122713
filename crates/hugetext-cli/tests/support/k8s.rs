//! The Kubernetes manifests under `packaging/k8s`, read as YAML documents:
//! shared by the packaging tests (`agent_packaging.rs`) and the pod run
//! under podman (`daemonset_pod.rs`).

use serde_yaml::Value as Yaml;

/// The YAML documents of a manifest, by its path from the repository root.
pub fn docs(rel: &str) -> Vec<Yaml> {
    let p = hugetext_testkit::root().join(rel);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect()
}

/// The document of `kind` among `docs` (a test failure when there is none).
pub fn of_kind<'a>(docs: &'a [Yaml], kind: &str) -> &'a Yaml {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in the manifest"))
}
