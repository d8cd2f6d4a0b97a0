//! Prints the reference of the custom resources (`docs/crd.md`).

fn main() {
    print!("{}", agentcomputer_crds::reference::render());
}
