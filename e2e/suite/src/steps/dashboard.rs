//! The chart's Grafana dashboard (charts/agent-computer/dashboards) names
//! only series the running operator, node agents and API gateway serve:
//! every metric a panel's query names, with the label values it selects
//! by equality, is in one of their `/metrics` pages.

use anyhow::{Context as _, Result, ensure};

use super::*;

/// A metric as a query names it: its name and the `label="value"`
/// matchers given with it.
#[derive(Debug, PartialEq, Eq)]
struct Selector {
    name: String,
    equal: Vec<(String, String)>,
}

/// The `agentcomputer_*` selectors of one PromQL expression.
fn selectors(expr: &str) -> Vec<Selector> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("agentcomputer_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(tail.len());
        let name = tail[..end].to_string();
        let mut equal = Vec::new();
        let after = &tail[end..];
        if let Some(body) = after.strip_prefix('{').and_then(|b| b.split_once('}')) {
            for matcher in body.0.split(',') {
                // Only `=`: `!=`, `=~` and `!~` select no one value.
                if let Some((k, v)) = matcher.split_once('=')
                    && !k.ends_with('!')
                    && !v.starts_with('~')
                {
                    equal.push((k.trim().to_string(), v.trim().trim_matches('"').to_string()));
                }
            }
        }
        out.push(Selector { name, equal });
        rest = &tail[end..];
    }
    out
}

/// Whether a `/metrics` page has a sample of `s`.
fn served(page: &str, s: &Selector) -> bool {
    page.lines().filter(|l| !l.starts_with('#')).any(|l| {
        let named = l
            .strip_prefix(&s.name)
            .is_some_and(|r| r.starts_with('{') || r.starts_with(' '));
        named
            && s.equal
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
    })
}

/// Every query of the dashboard's panels (rows included).
fn queries(dashboard: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut panels: Vec<&Value> = dashboard["panels"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    while let Some(p) = panels.pop() {
        panels.extend(p["panels"].as_array().into_iter().flatten());
        for t in p["targets"].as_array().into_iter().flatten() {
            if let Some(e) = t["expr"].as_str() {
                out.push(e.to_string());
            }
        }
    }
    out
}

/// The `/metrics` page of a pod labelled `app`, on `port`, through the API
/// server's pod proxy; the first pod that answers.
fn scrape(cx: &Context, app: &str, port: u16) -> Result<String> {
    let pods = cx.tools.kubectl_json(&[
        "-n",
        SYSTEM_NS,
        "get",
        "pods",
        "-l",
        &format!("app.kubernetes.io/name={app}"),
    ])?;
    let mut tried = Vec::new();
    for pod in pods["items"].as_array().into_iter().flatten() {
        let name = text(pod, "/metadata/name");
        let path = format!("/api/v1/namespaces/{SYSTEM_NS}/pods/{name}:{port}/proxy/metrics");
        let out = cx.tools.kubectl(&["get", "--raw", &path])?;
        if out.code == 0 {
            return Ok(out.stdout);
        }
        tried.push(format!("{name}: {}", out.stderr.trim()));
    }
    anyhow::bail!("no {app} pod served /metrics on {port}: {tried:?}")
}

pub(super) fn dashboard_metrics(cx: &mut Context) -> Result<String> {
    let path = cx
        .tools
        .repo
        .join("charts/agent-computer/dashboards/agent-computer.json");
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?,
    )?;
    let mut pages = String::new();
    for (app, port) in [
        ("agentcomputer-operator", 8080),
        ("agentcomputer-node-agent", 9090),
        ("agentcomputer-gateway", 9090),
    ] {
        pages.push_str(&scrape(cx, app, port)?);
    }
    let queries = queries(&dashboard);
    ensure!(!queries.is_empty(), "the dashboard has no queries");
    let mut named = 0;
    let mut missing = Vec::new();
    for q in &queries {
        let found = selectors(q);
        ensure!(
            !found.is_empty(),
            "a query names no agentcomputer metric: {q}"
        );
        for s in found {
            named += 1;
            if !served(&pages, &s) {
                missing.push(format!("{} {:?}", s.name, s.equal));
            }
        }
    }
    ensure!(
        missing.is_empty(),
        "the dashboard names series no component serves: {missing:?}"
    );
    Ok(format!(
        "{} queries, {named} series, each served",
        queries.len()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_with_their_equal_matchers() {
        let s = selectors(
            r#"max by (pod) (agentcomputer_exec_limit{limit="exec_memory", pod=~"a.*"}) / sum(rate(agentcomputer_node_execs_total[5m]))"#,
        );
        assert_eq!(
            s,
            vec![
                Selector {
                    name: "agentcomputer_exec_limit".into(),
                    equal: vec![("limit".into(), "exec_memory".into())]
                },
                Selector {
                    name: "agentcomputer_node_execs_total".into(),
                    equal: vec![]
                },
            ]
        );
        let s = selectors(r#"agentcomputer_gateway_computer_calls_total{code!="OK"}"#);
        assert!(s[0].equal.is_empty());
    }

    #[test]
    fn a_series_is_served_by_name_and_label() {
        let page =
            "# HELP agentcomputer_x x\nagentcomputer_x{limit=\"a\"} 1\nagentcomputer_x_total 2\n";
        let sel = |name: &str, equal: &[(&str, &str)]| Selector {
            name: name.into(),
            equal: equal
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        assert!(served(page, &sel("agentcomputer_x", &[("limit", "a")])));
        assert!(!served(page, &sel("agentcomputer_x", &[("limit", "b")])));
        assert!(served(page, &sel("agentcomputer_x_total", &[])));
        assert!(!served(page, &sel("agentcomputer_y", &[])));
    }
}
