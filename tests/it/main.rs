//! The end-to-end tests of the whole tool, in one binary (as nextest and insta keep theirs): the
//! real `cargo-llmreplay` on sample workspaces in temp dirs, real nextest and git, real HTTP on
//! 127.0.0.1, real client libraries and official SDKs, against fake providers on loopback that
//! speak the providers' wire formats. `support` holds the fakes and the handles on the binary.

mod support;

mod at_once;
mod bodies;
mod capture;
mod cli;
mod clients;
mod clouds;
mod daemon;
mod environments;
mod faults;
mod freshness;
mod hostile;
mod hostile51;
mod html_report;
mod init;
mod kept;
mod ledger;
mod mcp;
mod network;
mod node_at_once;
mod pace;
mod peers;
mod python_ids;
mod rerun;
mod review;
mod run_loop;
mod runlog;
mod runners;
mod sdk;
mod secrets;
mod sessions;
mod test_command;
mod trajectory;
mod volatile;
mod wire;
mod workflow;
