//! The offline gateway: every frame of a capture through the gateway's packet path (the
//! same [`Node`] the live workers drive), what the gateway would transmit on any port
//! written to another capture.

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use espgw_config::PortRole;
use espgw_core::host::HopLimit;
use espgw_core::neighbour::NeighbourCache;
use espgw_core::{Direction, Node, Tables, Transmit};
use espgw_io::pcap::{PcapReader, PcapWriter};
use espgw_io::Port;

/// What one run did.
#[derive(Debug, Default, Clone)]
pub struct RunStats {
    pub frames_in: u64,
    pub frames_out: u64,
    pub oversized: u64,
}

/// The port frames of direction `dir` arrive on: the first protected port for outbound,
/// the first unprotected one for inbound.
pub fn arrival_port(t: &Tables, dir: Direction) -> Result<u16, NoArrivalPort> {
    let role = match dir {
        Direction::Out => PortRole::Protected,
        Direction::In => PortRole::Unprotected,
    };
    t.ports
        .iter()
        .position(|p| p.role == role)
        .map(|i| i as u16)
        .ok_or(NoArrivalPort { role, dir })
}

/// The configuration has no port of the role a direction's traffic arrives on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoArrivalPort {
    /// The role wanted.
    pub role: PortRole,
    /// The direction of the traffic.
    pub dir: Direction,
}

impl std::fmt::Display for NoArrivalPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the configuration has no {:?} port for {} traffic",
            self.role, self.dir
        )
    }
}

impl std::error::Error for NoArrivalPort {}

/// A node for an offline run over `tables`: no learned neighbours (the configured ones
/// and ipsec-secgw's per-port defaults), TTL and hop limit left alone (a bump in the wire,
/// so that captures compare byte for byte with other implementations').
pub fn node(tables: Arc<Tables>) -> Node {
    Node::new(tables, Arc::new(NeighbourCache::default()), Vec::new())
        .with_hop_limit(HopLimit::Keep)
}

/// Runs `input` through `node`, as received on `port`, and writes every frame the node
/// transmits to `output` (same link type as the input).
pub fn run_pcap(
    node: &mut Node,
    port: u16,
    input: &Path,
    output: &Path,
    store: Option<&crate::seq_store::SeqStore>,
) -> io::Result<RunStats> {
    let mut reader = PcapReader::open(input)?;
    let mut writer = PcapWriter::create(output, reader.link_type())?;
    let burst = node.tables().burst;
    let mut pkts = Vec::with_capacity(burst);
    let mut tx = Transmit::new(node.tables().ports.len(), burst);
    let mut stats = RunStats::default();
    loop {
        let n = reader.rx_burst(node.pool(), &mut pkts, burst)?;
        if n == 0 {
            break;
        }
        stats.frames_in += n as u64;
        if let Some(s) = store {
            // Reserve more sequence numbers before the burst may need them.
            s.maintain(node.tables()).map_err(io::Error::other)?;
        }
        let now = Instant::now();
        node.receive(port, &mut pkts, now, &mut tx);
        node.housekeeping(now, &mut tx);
        stats.frames_out += write_all(&mut writer, node, &mut tx)?;
    }
    node.finish();
    writer.flush()?;
    if let Some(s) = store {
        s.save_inbound(node.tables()).map_err(io::Error::other)?;
    }
    stats.oversized = reader.oversized;
    Ok(stats)
}

/// Writes what every port's queue holds, in port order; returns how many frames.
fn write_all<W: std::io::Write>(
    writer: &mut PcapWriter<W>,
    node: &mut Node,
    tx: &mut Transmit,
) -> io::Result<u64> {
    let mut written = 0;
    for port in 0..tx.ports() {
        let queue = tx.queue(port);
        written += queue.len() as u64;
        writer.tx_burst(queue, node.pool())?;
        node.recycle_unsent(queue);
    }
    Ok(written)
}
