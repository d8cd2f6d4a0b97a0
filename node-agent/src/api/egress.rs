//! The egress policy between API messages and a computer's settings.

use agentcomputer_egress::{CidrConfig, EgressConfig, Mode, Policy, PortConfig, Protocol};
use agentcomputer_proto::v1 as pb;
use tonic::Status;

/// The stored form of a request's policy; `None` is deny-all. Errors:
/// INVALID_ARGUMENT naming the rule that does not validate.
pub fn from_proto(egress: Option<pb::Egress>) -> Result<EgressConfig, Status> {
    let Some(egress) = egress else {
        return Ok(EgressConfig::default());
    };
    let mode = match pb::EgressMode::try_from(egress.mode) {
        Ok(pb::EgressMode::Unspecified | pb::EgressMode::DenyAll) => Mode::DenyAll,
        Ok(pb::EgressMode::AllowAll) => Mode::AllowAll,
        Ok(pb::EgressMode::AllowList) => Mode::AllowList,
        Err(_) => {
            return Err(Status::invalid_argument(format!(
                "unknown egress mode {}",
                egress.mode
            )));
        }
    };
    let port = |n: u32| i32::try_from(n).unwrap_or(i32::MAX);
    let config = EgressConfig {
        mode,
        cidrs: egress
            .cidrs
            .into_iter()
            .map(|c| CidrConfig {
                cidr: c.cidr,
                ports: c
                    .ports
                    .into_iter()
                    .map(|p| PortConfig {
                        port: port(p.port),
                        end_port: (p.end_port != 0).then(|| port(p.end_port)),
                        protocol: Protocol::TCP,
                    })
                    .collect(),
            })
            .collect(),
        hosts: egress.hosts,
        allow_metadata: egress.allow_metadata,
    };
    Policy::new(config.clone()).map_err(|e| Status::invalid_argument(format!("egress: {e}")))?;
    Ok(config)
}

/// The API's view of a stored policy. Non-TCP port rules (possible in a
/// hand-edited settings file) admit no connection here and are left out.
pub fn to_proto(config: &EgressConfig) -> pb::Egress {
    let mode = match config.mode {
        Mode::DenyAll => pb::EgressMode::DenyAll,
        Mode::AllowAll => pb::EgressMode::AllowAll,
        Mode::AllowList => pb::EgressMode::AllowList,
    };
    let port = |n: i32| u32::try_from(n).unwrap_or(0);
    pb::Egress {
        mode: mode as i32,
        cidrs: config
            .cidrs
            .iter()
            .map(|c| pb::EgressCidr {
                cidr: c.cidr.clone(),
                ports: c
                    .ports
                    .iter()
                    .filter(|p| p.protocol == Protocol::TCP)
                    .map(|p| pb::EgressPorts {
                        port: port(p.port),
                        end_port: p.end_port.map(port).unwrap_or(0),
                    })
                    .collect(),
            })
            .collect(),
        hosts: config.hosts.clone(),
        allow_metadata: config.allow_metadata,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_validation() {
        let msg = pb::Egress {
            mode: pb::EgressMode::AllowList as i32,
            cidrs: vec![pb::EgressCidr {
                cidr: "10.0.0.0/8".into(),
                ports: vec![pb::EgressPorts {
                    port: 80,
                    end_port: 90,
                }],
            }],
            hosts: vec!["*.example.com".into()],
            allow_metadata: false,
        };
        let config = from_proto(Some(msg.clone())).unwrap();
        assert_eq!(config.cidrs[0].ports[0].end_port, Some(90));
        assert_eq!(to_proto(&config), msg);
        assert_eq!(from_proto(None).unwrap().mode, Mode::DenyAll);

        let bad = pb::Egress {
            mode: pb::EgressMode::AllowAll as i32,
            hosts: vec!["pypi.org".into()],
            ..pb::Egress::default()
        };
        let status = from_proto(Some(bad)).unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(
            status.message().contains("allow-list"),
            "{}",
            status.message()
        );
    }
}
