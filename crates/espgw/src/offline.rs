//! The offline gateway: every frame of a capture through the full pipeline, what the
//! gateway would transmit written to another capture.

use std::io;
use std::path::Path;

use espgw_core::packet::{PacketPool, Verdict};
use espgw_core::{Direction, Pipeline};
use espgw_io::pcap::{PcapReader, PcapWriter};
use espgw_io::Port;

/// What one run did, per port.
#[derive(Debug, Default, Clone)]
pub struct RunStats {
    pub frames_in: u64,
    pub frames_out: u64,
    pub oversized: u64,
}

/// Runs `input` through `pipeline` in `dir` and writes forwarded frames to `output`
/// (same link type as the input).
pub fn run_pcap(
    pipeline: &mut Pipeline,
    dir: Direction,
    input: &Path,
    output: &Path,
    store: Option<&crate::seq_store::SeqStore>,
) -> io::Result<RunStats> {
    let mut reader = PcapReader::open(input)?;
    let mut writer = PcapWriter::create(output, reader.link_type())?;
    let burst = pipeline.tables().burst;
    let mut pool = PacketPool::new(burst * 2);
    let mut pkts = Vec::with_capacity(burst);
    let mut tx = Vec::with_capacity(burst);
    let mut stats = RunStats::default();
    loop {
        let n = reader.rx_burst(&mut pool, &mut pkts, burst)?;
        if n == 0 {
            break;
        }
        stats.frames_in += n as u64;
        if let Some(s) = store {
            // Reserve more sequence numbers before the burst may need them.
            s.maintain(pipeline.tables()).map_err(io::Error::other)?;
        }
        pipeline.process(dir, &mut pkts);
        for p in pkts.drain(..) {
            match p.verdict {
                Verdict::Forward(_) => tx.push(p),
                _ => pool.put(p),
            }
        }
        stats.frames_out += tx.len() as u64;
        writer.tx_burst(&mut tx, &mut pool)?;
    }
    writer.flush()?;
    if let Some(s) = store {
        s.save_inbound(pipeline.tables())
            .map_err(io::Error::other)?;
    }
    stats.oversized = reader.oversized;
    Ok(stats)
}
