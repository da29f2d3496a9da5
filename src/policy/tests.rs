use super::*;

const DEFAULT: &str = r#"
principals = ["*"]
allow = ["**"]
deny = ["*+file:///**/.env", "*+file:///**/secrets/**"]
"#;
const CI_BOT: &str = r#"
principals = ["ci-bot"]
allow = ["docs+**", "everything+demo://resource/static/**"]
"#;
const CI_EXTRA: &str = r#"
principals = ["ci-bot", "auditor"]
allow = ["audit+**", "pages+file:///*.md", "cased+file:///Pub/**"]
deny = ["docs+file:///private/**"]
"#;

#[derive(Debug)]
enum Expect {
    Allow(&'static str, &'static str),
    Deny(&'static str, &'static str),
    DefaultDeny,
}

fn policies() -> PolicySet {
    PolicySet::from_texts(&[("default.toml", DEFAULT), ("ci-bot.toml", CI_BOT), ("ci-extra.toml", CI_EXTRA)])
        .expect("valid policies")
}

/// Normalise `uri`, decide for `principal`, compare with `expected`.
fn check(principal: &str, uri: &str, expected: Expect) {
    let (normal, decision) = policies().normalize_and_decide(principal, uri).expect("normalises");
    let want = match expected {
        Expect::Allow(file, pattern) => (true, Some(file), Some(pattern)),
        Expect::Deny(file, pattern) => (false, Some(file), Some(pattern)),
        Expect::DefaultDeny => (false, None, None),
    };
    let got = (decision.allowed, decision.file.as_deref(), decision.pattern.as_deref());
    assert_eq!(got, want, "{principal} reading {uri} (normalised {normal})");
    // The memoised judgement is the same, first (judged) and second time (remembered).
    let set = policies();
    for _ in 0..2 {
        let judged = set.judge(principal, uri).expect("normalises");
        assert_eq!((&judged.normalized, &judged.decision), (&normal, &decision), "{principal} judging {uri}");
    }
}

#[test]
fn decisions() {
    use Expect::*;
    // `*` fallback: anyone no file names.
    check("anonymous", "docs+file:///a.md", Allow("default.toml", "**"));
    check("local", "mem+urn:note:7", Allow("default.toml", "**"));
    check("anonymous", "docs+file:///x/.env", Deny("default.toml", "*+file:///**/.env"));
    check("anonymous", "docs+file:///x/secrets/k", Deny("default.toml", "*+file:///**/secrets/**"));
    // Deny globs are case-insensitive and also see the URI without query, fragment, trailing `/`.
    check("anonymous", "docs+file:///X/SECRETS/k", Deny("default.toml", "*+file:///**/secrets/**"));
    check("anonymous", "docs+file:///x/.env?y=1", Deny("default.toml", "*+file:///**/.env"));
    check("anonymous", "docs+file:///x/.env/", Deny("default.toml", "*+file:///**/.env"));
    check("anonymous", "docs+file:///x/secrets", Deny("default.toml", "*+file:///**/secrets/**"));
    check("anonymous", "docs+file:///x/secrets.md", Allow("default.toml", "**"));
    // A named principal: the union of the files naming it, not the `*` files.
    check("ci-bot", "docs+file:///a.md", Allow("ci-bot.toml", "docs+**"));
    check("ci-bot", "docs+urn:x", Allow("ci-bot.toml", "docs+**"));
    check("ci-bot", "docs+file:///x/.env", Allow("ci-bot.toml", "docs+**"));
    check(
        "ci-bot",
        "everything+demo://resource/static/1",
        Allow("ci-bot.toml", "everything+demo://resource/static/**"),
    );
    check("ci-bot", "everything+demo://resource/dynamic/1", DefaultDeny);
    check("ci-bot", "gh+repo://acme/app/README.md", DefaultDeny);
    check("ci-bot", "audit+file:///log", Allow("ci-extra.toml", "audit+**"));
    // Deny wins over an allow of another file.
    check("ci-bot", "docs+file:///private/plan.md", Deny("ci-extra.toml", "docs+file:///private/**"));
    check("auditor", "audit+x:y", Allow("ci-extra.toml", "audit+**"));
    check("auditor", "docs+file:///a.md", DefaultDeny);
    // `*` stays within a segment; allow globs are case-sensitive.
    check("auditor", "pages+file:///a.md", Allow("ci-extra.toml", "pages+file:///*.md"));
    check("auditor", "pages+file:///d/a.md", DefaultDeny);
    check("auditor", "cased+file:///Pub/a", Allow("ci-extra.toml", "cased+file:///Pub/**"));
    check("auditor", "cased+file:///pub/a", DefaultDeny);
}

#[test]
fn allow_all_allows_everything_and_lists_every_template() {
    let all = PolicySet::allow_all();
    assert_eq!(all.decide("x", "docs+file:///.env"), Decision { allowed: true, file: None, pattern: None });
    assert!(all.template_visible("x", "docs+file:///{+path}"));
    assert!(all.is_allow_all());
}

#[test]
fn double_star_crosses_slashes_wherever_it_is() {
    let set =
        PolicySet::from_texts(&[("p.toml", "principals=[\"*\"]\nallow=[\"a+**\", \"b+file:///x**.md\"]")]).unwrap();
    for allowed in ["a+file:///x/y/z", "a+urn:q", "b+file:///x.md", "b+file:///xy/z/w.md"] {
        assert!(set.allows("p", allowed), "{allowed}");
    }
    for denied in ["b+file:///y/x.md", "b+file:///x/y.txt", "c+a+x:y"] {
        assert!(!set.allows("p", denied), "{denied}");
    }
}

fn check_template(principal: &str, template: &str, visible: bool) {
    assert_eq!(policies().template_visible(principal, template), visible, "{principal}: {template}");
}

#[test]
fn templates_are_listed_when_an_expansion_may_be_allowed() {
    check_template("anonymous", "docs+file:///{+path}", true);
    check_template("anonymous", "docs+file:///secrets/{name}", false);
    check_template("anonymous", "docs+file:///{dir}/secrets/{name}", false);
    check_template("anonymous", "docs+file:///{dir}/.env", false);
    check_template("anonymous", "docs+file:///{dir}/.env{?v}", true);
    check_template("anonymous", "DOCS+FILE:///SECRETS/{x}", false);
    check_template("ci-bot", "docs+file:///{+path}", true);
    check_template("ci-bot", "everything+demo://resource/static/{id}", true);
    check_template("ci-bot", "everything+demo://resource/{kind}/{id}", true);
    check_template("ci-bot", "everything+demo://resource/dynamic/{id}", false);
    check_template("ci-bot", "gh+repo://{owner}/{repo}/README.md", false);
    check_template("ci-bot", "docs+file:///private/{name}", false);
    check_template("auditor", "pages+file:///{name}.md", true);
    check_template("nobody-allows", "x+{y}", true);
    let deny_all = PolicySet::from_texts(&[("none.toml", "principals = [\"*\"]\n")]).unwrap();
    assert!(!deny_all.template_visible("anyone", "docs+file:///{+path}"));
}

#[test]
fn every_problem_of_every_file_is_reported() {
    let problems = PolicySet::from_texts(&[
        ("a.toml", "principals = []\nallow = [\"docs+[\", \"\"]\ncolour = 1\n"),
        ("b.toml", "allow = [\"Docs+**\"]\ndeny = [\"a**b**c**d**e\"]\n"),
        ("c.toml", "principals = [\"a b\", \"x*\"]\n"),
        ("d.toml", "principals = [\"*\"]\nallow = \"**\"\n"),
        ("e.toml", "principals = [\"*\"\n"),
    ])
    .expect_err("invalid");
    let found: Vec<String> = problems.iter().map(|p| format!("{}: {}", p.at, p.message)).collect();
    let expected = [
        "a.toml: colour: unknown key",
        "a.toml: principals: names no principal",
        "a.toml: allow[0]: `docs+[` is not a valid glob",
        "a.toml: allow[1]: empty pattern",
        "b.toml: missing `principals`",
        "b.toml: allow[0]: `Docs+**` has an upper-case scheme",
        "b.toml: deny[0]: `a**b**c**d**e` has more than 3",
        "c.toml: principals: `a b` is not a principal name",
        "c.toml: principals: `x*` is not a principal name",
        "d.toml: allow:",
        "e.toml",
    ];
    for want in expected {
        assert!(found.iter().any(|f| f.starts_with(want)), "missing {want:?} in {found:#?}");
    }
    assert_eq!(found.len(), expected.len(), "{found:#?}");
}

#[test]
fn load_reads_only_toml_files_in_name_order() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("default.toml"), DEFAULT).unwrap();
    std::fs::write(dir.path().join("ci-bot.toml.example"), "not = [valid").unwrap();
    std::fs::write(dir.path().join("README.md"), "# notes").unwrap();
    std::fs::write(dir.path().join("a.toml"), CI_BOT).unwrap();
    let set = PolicySet::load(dir.path()).unwrap();
    assert_eq!(set.files(), ["a.toml", "default.toml"]);
    assert!(set.allows("ci-bot", "docs+file:///x"));

    let empty = tempfile::tempdir().unwrap();
    let problems = PolicySet::load(empty.path()).expect_err("no files");
    assert!(problems[0].message.starts_with("no *.toml policy files"), "{problems:?}");
    let problems = PolicySet::load(&empty.path().join("missing")).expect_err("no dir");
    assert!(problems[0].message.starts_with("cannot read the policies directory"), "{problems:?}");
}

#[test]
fn the_shipped_policies_load() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("policies");
    let set = PolicySet::load(&dir).expect("shipped policies are valid");
    assert!(set.allows("anonymous", "docs+file:///guide.md"));
    assert!(!set.allows("anonymous", "docs+file:///app/.env"));
    let example = std::fs::read_to_string(dir.join("ci-bot.toml.example")).unwrap();
    PolicySet::from_texts(&[("ci-bot.toml", &example)]).expect("the example is valid once renamed");
}

/// The corpus parser the integration tests use too (plain std, no crate items).
#[path = "../../tests/support/bypass_corpus.rs"]
mod bypass_corpus;

#[test]
fn every_bypass_corpus_line_is_denied_or_refused() {
    let sections = bypass_corpus::bypass_corpus();
    assert!(sections.len() >= 2, "{} sections", sections.len());
    assert!(sections[0].denied.len() >= 40, "{} lines", sections[0].denied.len());
    for section in sections {
        let set = PolicySet::from_texts(&[("corpus.toml", &section.policy)]).unwrap();
        assert!(!section.allowed.is_empty(), "[{}] has positive controls", section.name);
        for (line, _) in &section.allowed {
            let (normal, decision) = set.normalize_and_decide("anonymous", line).unwrap();
            assert!(decision.allowed, "[{}] control {line:?} (normalised {normal:?}) is denied", section.name);
        }
        for line in &section.denied {
            if let Ok((normal, decision)) = set.normalize_and_decide("anonymous", line) {
                assert!(!decision.allowed, "[{}] {line:?} normalised to {normal:?} is allowed", section.name);
            }
        }
    }
}

/// Allow and deny judge the same readings of a URI: the fragment never counts, and the query
/// must be covered by an allow both ways, while a deny hits either way.
#[test]
fn allows_and_denies_judge_queries_and_fragments_alike() {
    let md = "principals = [\"*\"]\nallow = [\"ev+ev://frag/*.md\", \"ev+ev://q/{*.md,*.md[?]*}\"]\n";
    let set = PolicySet::from_texts(&[("md.toml", md)]).unwrap();
    for (uri, allowed) in [
        ("ev+ev://frag/notes.md", true),
        ("ev+ev://frag/notes.md#top", true),
        ("ev+ev://frag/secret.txt#.md", false),
        ("ev+ev://frag/secret.txt?x=.md", false),
        ("ev+ev://frag/secret.txt?.md", false),
        ("ev+ev://frag/notes.md?v=1", false),
        ("ev+ev://q/notes.md?v=1", true),
        ("ev+ev://q/secret.txt?x=.md", false),
    ] {
        assert_eq!(set.allows("bob", uri), allowed, "{uri}");
    }
    let deny = "principals = [\"*\"]\nallow = [\"**\"]\ndeny = [\"**/secret.txt\"]\n";
    let set = PolicySet::from_texts(&[("deny.toml", deny)]).unwrap();
    for uri in [
        "ev+ev://d/secret.txt",
        "ev+ev://d/secret.txt?a=b",
        "ev+ev://d/secret.txt#x",
        "ev+ev://d/secret.txt/",
        "ev+ev://d/secret.txt%23x",
        "ev+ev://d/secret.txt%3fa=b",
    ] {
        assert!(!set.allows("bob", uri), "{uri}");
    }
    assert!(set.allows("bob", "ev+ev://d/public.txt?a=b"));
}

const ENG: &str = r#"
principals = ["group:eng"]
allow = ["eng+**", "docs+file:///private/**"]
deny = ["docs+file:///a.md"]
"#;

#[test]
fn groups_add_their_files_and_deny_wins_across_principal_and_groups() {
    let set = PolicySet::from_texts(&[("default.toml", DEFAULT), ("ci-bot.toml", CI_BOT), ("eng.toml", ENG)])
        .expect("valid policies");
    let decide = |principal: &str, groups: &[&str], uri: &str| {
        let decision = set.decide(&identity(principal, groups), uri);
        (decision.allowed, decision.file, decision.pattern)
    };
    let allow = |file: &str, pattern: &str| (true, Some(file.to_string()), Some(pattern.to_string()));
    let deny = |file: &str, pattern: &str| (false, Some(file.to_string()), Some(pattern.to_string()));
    // A named principal in a named group: the union, and the group's deny beats the allow of ci-bot.
    assert_eq!(decide("ci-bot", &["eng"], "eng+x:y"), allow("eng.toml", "eng+**"));
    assert_eq!(decide("ci-bot", &["eng"], "docs+urn:x"), allow("ci-bot.toml", "docs+**"));
    assert_eq!(decide("ci-bot", &["eng"], "docs+file:///a.md"), deny("eng.toml", "docs+file:///a.md"));
    // An unnamed principal in a named group: only the group's rules, not the `*` files.
    assert_eq!(decide("dave", &["eng"], "eng+x:y"), allow("eng.toml", "eng+**"));
    assert_eq!(decide("dave", &["eng"], "mem+urn:note:7"), (false, None, None));
    // Groups no file names change nothing: `*` still applies to the unnamed.
    assert_eq!(decide("dave", &["sales"], "mem+urn:note:7"), allow("default.toml", "**"));
    assert_eq!(decide("dave", &["sales"], "eng+x:y"), allow("default.toml", "**"));
    // Templates: listed when any of the identity's rule sets may allow an expansion.
    assert!(set.template_visible(&identity("dave", &["eng"]), "eng+{x}"));
    assert!(!set.template_visible(&identity("dave", &["eng"]), "mem+{x}"));
}

#[test]
fn group_entries_and_principal_names_are_checked() {
    let problems = PolicySet::from_texts(&[("g.toml", "principals = [\"group:\", \"group:a b\", \"group:x,y\"]\n")])
        .expect_err("invalid group names");
    assert_eq!(problems.len(), 3, "{problems:?}");
    assert!(problems.iter().all(|p| p.message.contains("is not a group name")), "{problems:?}");
    assert!(!is_valid_principal("group:eng"), "a principal name cannot pose as a group entry");
}

/// The memo answers exactly what normalising and deciding answers, refusals included, for
/// every principal and URI of a table, asked in any order and again.
#[test]
fn judgements_are_the_decisions_of_their_own_set() {
    let set = policies();
    let uris = [
        "docs+file:///guide.md",
        "DOCS+FILE:///a/../guide.md",
        "everything+demo://resource/static/x",
        "x+file:///srv/.env",
        "x+file:///srv/%2e%2e/secrets/k",
        "docs+file:///private/p",
        "no scheme",
        "x+file:///a%2Fb",
        "",
    ];
    for round in 0..2 {
        let grouped = identity("ci-bot", &["eng"]);
        for principal in ["anyone", "ci-bot", "auditor", grouped.as_str()] {
            for uri in uris {
                let expected = set.normalize_and_decide(principal, uri);
                let judged = set.judge(principal, uri).map(|j| (j.normalized.clone(), j.decision.clone()));
                assert_eq!(judged, expected, "round {round}: {principal} judging {uri:?}");
            }
        }
    }
}

/// A reload installs a new set, and the new set answers with its own rules at once: nothing
/// the old set remembered is answered by it.
#[test]
fn a_new_set_does_not_answer_with_the_old_sets_memory() {
    let open = PolicySet::from_texts(&[("a.toml", "principals = [\"*\"]\nallow = [\"**\"]\n")]).expect("valid");
    let uri = "docs+file:///guide.md";
    assert!(open.judge("alice", uri).expect("normalises").decision.allowed);
    assert!(open.judge("alice", uri).expect("normalises").decision.allowed, "remembered");
    let closed = PolicySet::from_texts(&[("a.toml", "principals = [\"*\"]\nallow = [\"**\"]\ndeny = [\"docs+**\"]\n")])
        .expect("valid");
    let denied = closed.judge("alice", uri).expect("normalises");
    assert!(!denied.decision.allowed);
    assert_eq!(denied.decision.pattern.as_deref(), Some("docs+**"));
    assert!(open.judge("alice", uri).expect("normalises").decision.allowed, "each set keeps its own answers");
}

/// The memo stays bounded: long URIs are not kept, and it empties itself when full, still
/// answering correctly after.
#[test]
fn the_memo_is_bounded() {
    let set = PolicySet::allow_all();
    let long = format!("docs+file:///{}", "a".repeat(memo::MAX_URI_BYTES));
    assert!(set.judge("alice", &long).expect("normalises").decision.allowed);
    assert_eq!(set.memo.len(), 0, "a long URI is judged, not kept");
    for i in 0..memo::MAX_ENTRIES + 10 {
        let uri = format!("docs+file:///{i}");
        assert_eq!(set.judge("alice", &uri).expect("normalises").normalized, uri);
    }
    assert!(set.memo.len() <= memo::MAX_ENTRIES, "{}", set.memo.len());
    assert!(set.memo.len() >= 10, "it keeps answering and keeping after emptying");
}
