use super::*;

#[test]
fn a_child_environment_holds_the_allowlist_inherit_env_and_env() {
    let parent = [("PATH", "/bin"), ("LC_ALL", "C"), ("SECRET_TOKEN", "s3cret"), ("EXTRA", "x"), ("OWN", "old")]
        .into_iter()
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
    let env = BTreeMap::from([("OWN".to_string(), "mine".to_string())]);
    let mut got: Vec<(String, String)> = child_environment(parent, &["EXTRA".into()], &env, None)
        .into_iter()
        .map(|(k, v)| (k.into_string().unwrap(), v.into_string().unwrap()))
        .collect();
    got.sort();
    let expected = [("EXTRA", "x"), ("LC_ALL", "C"), ("OWN", "mine"), ("PATH", "/bin")];
    assert_eq!(got, expected.map(|(k, v)| (k.to_string(), v.to_string())));
}
