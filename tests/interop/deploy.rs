//! The `deploy/` example (3 replicas + Redis + a load balancer) checked by real validators and
//! against the project: the Kubernetes manifests by `kubernetes-validate --strict` (Kubernetes
//! 1.37 schemas), the compose file by `check-jsonschema` (the compose-spec schema), the haproxy
//! configurations (`deploy/haproxy.cfg`, and `deploy/bare-metal/haproxy.cfg` of the bare-metal
//! recipe) by `haproxy -c`; all pinned and installed by `.ci/install-deploy-checks.sh` (a venv
//! in `.peers/deploy`, Debian's haproxy). Then what the files say is held against what the
//! proxy does: the config passes the proxy's own loader, ports and health paths agree with it,
//! every secret the config names is provided, and the ConfigMap carries the config verbatim. No
//! container engine or cluster is needed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use figment::providers::Format;
use mcp_resource_proxy::config::Config;
use serde_json::Value;

use crate::support::peers::repo_root;

const K8S_VERSION: &str = "1.37.0";
const SECRET_ENV: &str = "PROXY_CLUSTER_SECRET";
const TOKEN_ENV: &str = "PROXY_TOKEN_PLATFORM";
/// The setting (through the environment) where the other replicas reach a replica.
const ADVERTISE_ENV: &str = "MCP_PROXY_CLUSTER__ADVERTISE_URL";

fn deploy() -> PathBuf {
    repo_root().join("deploy")
}

/// Runs `.ci/install-deploy-checks.sh` once per test process; the path of the venv's `bin`.
fn validators() -> PathBuf {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    let done = DONE.get_or_init(|| {
        let output = Command::new("bash")
            .arg(repo_root().join(".ci/install-deploy-checks.sh"))
            .current_dir(repo_root())
            .output()
            .map_err(|e| e.to_string())?;
        if output.status.success() {
            Ok(())
        } else {
            Err(format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr)))
        }
    });
    if let Err(said) = done {
        panic!(".ci/install-deploy-checks.sh failed: {said}");
    }
    repo_root().join(".peers/deploy/bin")
}

/// Runs `program args` in `dir`; its exit status and everything it said.
fn run(program: &Path, args: &[&str], dir: &Path) -> (bool, String) {
    let output = Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", program.display()));
    let said = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.success(), said)
}

/// The manifests of `deploy/k8s` (the kustomization aside: it is no Kubernetes object).
fn manifests() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(deploy().join("k8s"))
        .expect("deploy/k8s")
        .map(|entry| entry.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".yaml") && name != "kustomization.yaml")
        .collect();
    names.sort();
    names
}

/// Every YAML document of `path`, as JSON (read by PyYAML from the validators' venv).
fn yaml_documents(path: &Path) -> Vec<Value> {
    let python = validators().join("python");
    let script = "import json, sys, yaml\nprint(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))";
    let (ok, said) = run(&python, &["-c", script, &path.display().to_string()], &deploy());
    assert!(ok, "{}: {said}", path.display());
    serde_json::from_str(&said).expect("PyYAML's JSON")
}

fn yaml(path: &Path) -> Value {
    let mut documents = yaml_documents(path);
    assert_eq!(documents.len(), 1, "{}: one document", path.display());
    documents.remove(0)
}

fn k8s(name: &str) -> Value {
    yaml(&deploy().join("k8s").join(name))
}

/// `deploy/config.toml` through the proxy's loader, the secrets it names standing in (a cluster
/// secret must be at least 32 bytes): every section is validated, `[cluster]` included.
fn loaded_config() -> Config {
    let text = std::fs::read_to_string(deploy().join("config.toml")).expect("deploy/config.toml");
    let lookup = |name: &str| {
        [SECRET_ENV, TOKEN_ENV].contains(&name).then(|| format!("{name}-a-test-value-long-enough-for-any-rule"))
    };
    Config::from_toml(&text, &deploy(), &lookup).unwrap_or_else(|error| panic!("deploy/config.toml: {error}"))
}

/// The raw TOML of `deploy/config.toml`, for what the loader does not (yet) type.
fn config_toml() -> Value {
    let text = std::fs::read_to_string(deploy().join("config.toml")).expect("deploy/config.toml");
    let figment = figment::Figment::from(figment::providers::Toml::string(&text));
    figment.extract::<Value>().expect("deploy/config.toml is TOML")
}

fn port(address: &str) -> u16 {
    address.rsplit_once(':').and_then(|(_, port)| port.parse().ok()).unwrap_or_else(|| panic!("{address}: no port"))
}

#[test]
fn the_kubernetes_manifests_pass_kubernetes_validate_strict() {
    let bin = validators();
    let names = manifests();
    assert!(names.len() >= 7, "{names:?}");
    let mut args = vec!["--strict", "-k", K8S_VERSION];
    args.extend(names.iter().map(String::as_str));
    let (ok, said) = run(&bin.join("kubernetes-validate"), &args, &deploy().join("k8s"));
    assert!(ok, "{said}");
    for name in &names {
        assert!(said.contains(&format!("{name} passed")), "{name} not validated: {said}");
    }
}

#[test]
fn the_kustomization_lists_every_manifest() {
    let kustomization = k8s("kustomization.yaml");
    let listed: BTreeSet<String> = kustomization["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .map(|r| r.as_str().expect("a file name").to_string())
        .collect();
    assert_eq!(listed, manifests().into_iter().collect::<BTreeSet<_>>());
}

#[test]
fn the_compose_file_passes_the_compose_spec_schema() {
    let bin = validators();
    let (ok, said) =
        run(&bin.join("check-jsonschema"), &["--builtin-schema", "vendor.compose-spec", "compose.yaml"], &deploy());
    assert!(ok && said.contains("ok -- validation done"), "{said}");
}

#[test]
fn the_haproxy_configuration_passes_haproxy_check() {
    validators();
    let (ok, said) = run(Path::new("/usr/sbin/haproxy"), &["-c", "-f", "haproxy.cfg"], &deploy());
    assert!(ok && said.contains("Configuration file is valid"), "{said}");
    // Outside Docker the replicas' name does not resolve; nothing else may be wrong.
    for line in said.lines().filter(|l| l.contains("[WARNING]") || l.contains("[ALERT]")) {
        assert!(line.contains("could not resolve address 'proxy'"), "{line}");
    }
}

#[test]
fn the_bare_metal_haproxy_configuration_passes_haproxy_check_with_no_warning() {
    validators();
    let (ok, said) = run(Path::new("/usr/sbin/haproxy"), &["-c", "-f", "bare-metal/haproxy.cfg"], &deploy());
    assert!(ok && said.contains("Configuration file is valid"), "{said}");
    assert!(!said.contains("[WARNING]") && !said.contains("[ALERT]"), "{said}");
}

#[test]
fn the_config_passes_the_proxys_loader_with_the_cluster_contract() {
    let config = loaded_config();
    assert_eq!(config.server.listen.port(), 8080);
    assert_eq!(config.server.admin_listen.map(|a| a.port()), Some(9464));
    assert!(config.cluster.is_some(), "deploy/config.toml has a [cluster] section");
    let raw = config_toml();
    let cluster = raw["cluster"].as_object().expect("[cluster]");
    let keys: BTreeSet<&str> = cluster.keys().map(String::as_str).collect();
    assert_eq!(keys, BTreeSet::from(["redis_url", "secret_env"]));
    assert_eq!(cluster["redis_url"], "redis://redis:6379/0", "the Redis Service / compose service is `redis`");
    assert_eq!(cluster["secret_env"], SECRET_ENV);
    assert!(!SECRET_ENV.starts_with("MCP_PROXY_"), "MCP_PROXY_… variables are read as settings");
    assert_eq!(raw["auth"]["tokens"][0]["token_env"], TOKEN_ENV);
}

#[test]
fn the_configmap_carries_the_config_and_policies_verbatim() {
    let configmap = k8s("configmap.yaml");
    let read = |path: &str| std::fs::read_to_string(deploy().join(path)).expect(path);
    assert_eq!(configmap["data"]["config.toml"], read("config.toml"));
    assert_eq!(configmap["data"]["default.toml"], read("policies/default.toml"));
    let deployment = k8s("deployment.yaml");
    let volume = deployment["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == "config")
        .expect("the config volume");
    let paths: Vec<&Value> =
        volume["configMap"]["items"].as_array().expect("items").iter().map(|i| &i["path"]).collect();
    // The config names its policies folder relative to itself.
    assert_eq!(config_toml()["policies"]["dir"], "policies");
    assert_eq!(paths, [&Value::from("config.toml"), &Value::from("policies/default.toml")]);
}

#[test]
fn the_kubernetes_deployment_agrees_with_the_config_and_the_image() {
    let raw = config_toml();
    let listen = port(raw["server"]["listen"].as_str().expect("listen"));
    let admin = port(raw["server"]["admin_listen"].as_str().expect("admin_listen"));
    let deployment = k8s("deployment.yaml");
    assert_eq!(deployment["spec"]["replicas"], 3);
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["runAsUser"], 10001, "the Containerfile's user");
    let container = &pod["containers"][0];
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(container["securityContext"]["allowPrivilegeEscalation"], false);
    assert!(container["resources"]["requests"].is_object() && container["resources"]["limits"].is_object());
    let args: Vec<&str> = container["args"].as_array().expect("args").iter().filter_map(Value::as_str).collect();
    assert!(args.windows(2).any(|w| w == ["--config", "/etc/mcp-resource-proxy/config.toml"]), "{args:?}");
    assert!(args.windows(2).any(|w| w == ["--listen", &format!("0.0.0.0:{listen}")]), "{args:?}");
    let ports: Vec<(String, u64)> = container["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .map(|p| (p["name"].as_str().unwrap().to_string(), p["containerPort"].as_u64().unwrap()))
        .collect();
    assert_eq!(ports, [("mcp".to_string(), u64::from(listen)), ("admin".to_string(), u64::from(admin))]);
    for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")] {
        let get = &container[probe]["httpGet"];
        assert_eq!((&get["path"], &get["port"]), (&Value::from(path), &Value::from("admin")), "{probe}");
        assert_eq!(get["httpHeaders"][0], serde_json::json!({"name": "Host", "value": "127.0.0.1"}), "{probe}");
    }
    assert_eq!(container["envFrom"][0]["secretRef"]["name"], "mcp-resource-proxy");
    // The other replicas reach this pod at its IP (the downward API), for per-principal sessions.
    let env = container["env"].as_array().expect("env");
    let named = |name: &str| env.iter().find(|e| e["name"] == name).unwrap_or_else(|| panic!("{name} in env"));
    assert_eq!(named("POD_IP")["valueFrom"]["fieldRef"]["fieldPath"], "status.podIP");
    assert_eq!(named(ADVERTISE_ENV)["value"], format!("http://$(POD_IP):{listen}"));
    let pod_ip = env.iter().position(|e| e["name"] == "POD_IP");
    assert!(pod_ip < env.iter().position(|e| e["name"] == ADVERTISE_ENV), "$(POD_IP) is defined before its use");
    let secret = k8s("secret.yaml");
    let provided: BTreeSet<&str> =
        secret["stringData"].as_object().expect("stringData").keys().map(String::as_str).collect();
    assert_eq!(provided, BTreeSet::from([SECRET_ENV, TOKEN_ENV]));
    let redis = k8s("redis-service.yaml");
    assert_eq!(
        (&redis["metadata"]["name"], &redis["spec"]["ports"][0]["port"]),
        (&Value::from("redis"), &Value::from(6379))
    );
}

#[test]
fn the_compose_file_and_haproxy_agree_with_the_config() {
    let raw = config_toml();
    let listen = port(raw["server"]["listen"].as_str().expect("listen"));
    let admin = port(raw["server"]["admin_listen"].as_str().expect("admin_listen"));
    let compose = yaml(&deploy().join("compose.yaml"));
    let services = &compose["services"];
    let proxy = &services["proxy"];
    assert_eq!(proxy["deploy"]["replicas"], 3);
    assert_eq!(proxy["build"]["dockerfile"], "Containerfile");
    assert!(deploy().join(proxy["build"]["context"].as_str().unwrap()).join("Containerfile").is_file());
    let environment: BTreeSet<&str> =
        proxy["environment"].as_object().expect("environment").keys().map(String::as_str).collect();
    assert_eq!(environment, BTreeSet::from([SECRET_ENV, TOKEN_ENV, ADVERTISE_ENV]));
    assert_eq!(proxy["environment"][ADVERTISE_ENV], format!("http://{{hostname}}:{listen}"));
    let volumes: Vec<&str> = proxy["volumes"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(volumes.contains(&"./config.toml:/etc/mcp-resource-proxy/config.toml:ro"), "{volumes:?}");
    assert!(volumes.contains(&"./policies:/etc/mcp-resource-proxy/policies:ro"), "{volumes:?}");
    assert!(services["redis"]["image"].as_str().unwrap().contains("redis:7"));
    assert!(services["haproxy"]["image"].as_str().unwrap().contains("haproxy:2.6"));

    let haproxy = std::fs::read_to_string(deploy().join("haproxy.cfg")).expect("haproxy.cfg");
    let directives: Vec<&str> = haproxy.lines().map(str::trim).filter(|l| !l.starts_with('#')).collect();
    assert!(directives.contains(&"balance roundrobin"));
    assert!(!haproxy.contains("stick") && !haproxy.contains("cookie"), "no affinity");
    assert!(directives.contains(&"http-check send meth GET uri /readyz ver HTTP/1.1 hdr Host 127.0.0.1"));
    assert!(directives.contains(&format!("server-template proxy 3 proxy:{listen}").as_str()));
    assert!(directives.iter().any(|d| d.starts_with(&format!("default-server check port {admin} "))));
}
