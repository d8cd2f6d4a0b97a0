//! Prints the MCP tools' reference (`docs/mcp-tools.md`).

fn main() {
    print!("{}", agentcomputer_mcp::tools::reference::render());
}
