//! Compiles the CSI spec's `csi.proto` and the kubelet's plugin
//! registration `api.proto` (see `proto/README.md` for their sources) with
//! `protox`, a pure-Rust protobuf compiler, so building needs no system
//! `protoc`. Only servers are generated for the crate; clients too, for the
//! tests that act as the kubelet.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = ["csi/v1/csi.proto", "pluginregistration/v1/api.proto"];
    for p in protos {
        println!("cargo:rerun-if-changed=proto/{p}");
    }
    let fds = protox::compile(protos, ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
