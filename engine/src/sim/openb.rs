//! The Alibaba openb trace format (node and pod CSVs), parsed from text. Errors name the
//! file, the line and the field.

use crate::core::alloc::Request;
use crate::core::fleet::{Fleet, Node, MILLI};
use crate::sim::fill::Pod;

/// A problem in a CSV file, shown as `file:line: message`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsvError {
    pub file: String,
    pub line: usize,
    pub message: String,
}

impl std::fmt::Display for CsvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.message)
    }
}

struct Table<'a> {
    file: &'a str,
    columns: Vec<&'a str>,
    rows: Vec<(usize, Vec<&'a str>)>,
}

impl<'a> Table<'a> {
    fn parse(file: &'a str, text: &'a str, required: &[&str]) -> Result<Table<'a>, CsvError> {
        let err = |line, message: String| CsvError {
            file: file.to_string(),
            line,
            message,
        };
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty());
        let Some((_, header)) = lines.next() else {
            return Err(err(1, "the file is empty; expected a CSV header".into()));
        };
        let columns: Vec<&str> = header
            .split(',')
            .map(|c| c.trim().trim_start_matches('\u{feff}'))
            .collect();
        for r in required {
            if !columns.contains(r) {
                return Err(err(
                    1,
                    format!(
                        "missing column `{r}` (the header has {})",
                        columns.join(", ")
                    ),
                ));
            }
        }
        let mut rows = Vec::new();
        for (i, line) in lines {
            if line.contains('"') {
                return Err(err(
                    i + 1,
                    "quoted CSV fields are not supported in openb files".into(),
                ));
            }
            let cells: Vec<&str> = line.split(',').map(str::trim).collect();
            if cells.len() != columns.len() {
                return Err(err(
                    i + 1,
                    format!("expected {} fields, found {}", columns.len(), cells.len()),
                ));
            }
            rows.push((i + 1, cells));
        }
        Ok(Table {
            file,
            columns,
            rows,
        })
    }

    fn cell<'r>(&self, row: &'r [&'a str], column: &str) -> &'a str {
        self.columns
            .iter()
            .position(|c| *c == column)
            .and_then(|i| row.get(i))
            .copied()
            .unwrap_or("")
    }

    fn number(
        &self,
        line: usize,
        row: &[&'a str],
        column: &str,
        max: u64,
    ) -> Result<u64, CsvError> {
        let raw = self.cell(row, column);
        let value: u64 = raw.parse().map_err(|_| CsvError {
            file: self.file.to_string(),
            line,
            message: format!(
                "field `{column}`: expected a whole number of zero or more, found `{raw}`"
            ),
        })?;
        if value > max {
            return Err(CsvError {
                file: self.file.to_string(),
                line,
                message: format!("field `{column}`: {value} is above the limit of {max}"),
            });
        }
        Ok(value)
    }
}

/// `sn,cpu_milli,memory_mib,gpu,model`: one node per row, all GPUs of one model.
pub fn parse_nodes(file: &str, text: &str) -> Result<Fleet, CsvError> {
    let t = Table::parse(
        file,
        text,
        &["sn", "cpu_milli", "memory_mib", "gpu", "model"],
    )?;
    let mut nodes = Vec::with_capacity(t.rows.len());
    for (line, row) in &t.rows {
        let name = t.cell(row, "sn");
        let cpu = t.number(*line, row, "cpu_milli", 10_000_000)?;
        let mem = t.number(*line, row, "memory_mib", 1 << 40)?;
        let gpus = t.number(*line, row, "gpu", 1024)?;
        let model = t.cell(row, "model");
        if gpus > 0 && (model.is_empty() || model == "nan") {
            return Err(CsvError {
                file: file.into(),
                line: *line,
                message: format!("node `{name}` has {gpus} GPUs but no `model`"),
            });
        }
        nodes.push(Node::uniform(
            name,
            cpu,
            mem,
            u32::try_from(gpus).unwrap_or(0),
            model,
        ));
    }
    if nodes.is_empty() {
        return Err(CsvError {
            file: file.into(),
            line: 1,
            message: "the node list has no nodes".into(),
        });
    }
    Ok(Fleet { nodes })
}

/// `name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,...]`: one pod per row; without
/// a `gpu_spec` column (as in the multigpu variants) a pod takes any model.
pub fn parse_pods(file: &str, text: &str) -> Result<Vec<Pod>, CsvError> {
    let t = Table::parse(file, text, POD_COLUMNS)?;
    t.rows
        .iter()
        .map(|(line, row)| pod(&t, *line, row))
        .collect()
}

const POD_COLUMNS: &[&str] = &["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"];

/// When a pod of a timed openb list arrived, was scheduled and was deleted (seconds from
/// the trace start), and its line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodTimes {
    pub line: usize,
    pub creation: i64,
    /// `None` for pods the original cluster never scheduled.
    pub scheduled: Option<i64>,
    pub deletion: Option<i64>,
}

/// Pods with their times, for replay: the lists that carry `creation_time` and
/// `deletion_time` (all but the multigpu variants).
pub fn parse_timed_pods(file: &str, text: &str) -> Result<Vec<(Pod, PodTimes)>, CsvError> {
    let mut columns = POD_COLUMNS.to_vec();
    columns.extend(["creation_time", "deletion_time", "scheduled_time"]);
    let t = Table::parse(file, text, &columns)?;
    let optional = |line: usize, row: &[&str], column: &str| -> Result<Option<i64>, CsvError> {
        let raw = t.cell(row, column);
        if raw.is_empty() || raw == "nan" {
            return Ok(None);
        }
        t.number(line, row, column, 1 << 40).map(|v| Some(v as i64))
    };
    let mut pods = Vec::with_capacity(t.rows.len());
    for (line, row) in &t.rows {
        let creation = t.number(*line, row, "creation_time", 1 << 40)? as i64;
        let scheduled = optional(*line, row, "scheduled_time")?;
        let deletion = optional(*line, row, "deletion_time")?;
        let err = |message: String| CsvError {
            file: file.into(),
            line: *line,
            message,
        };
        if scheduled.is_some_and(|s| s < creation) {
            return Err(err(
                "field `scheduled_time`: before the pod's `creation_time`".into(),
            ));
        }
        if let Some(d) = deletion {
            if d < scheduled.unwrap_or(creation) {
                return Err(err(
                    "field `deletion_time`: before the pod was created or scheduled".into(),
                ));
            }
        }
        pods.push((
            pod(&t, *line, row)?,
            PodTimes {
                line: *line,
                creation,
                scheduled,
                deletion,
            },
        ));
    }
    Ok(pods)
}

fn pod(t: &Table<'_>, line: usize, row: &[&str]) -> Result<Pod, CsvError> {
    let file = t.file;
    let num_gpu = t.number(line, row, "num_gpu", 1024)?;
    let gpu_milli = t.number(line, row, "gpu_milli", u64::from(MILLI))?;
    if num_gpu > 0 && gpu_milli == 0 {
        return Err(CsvError {
            file: file.into(),
            line,
            message: "field `gpu_milli`: a GPU pod needs more than 0".into(),
        });
    }
    if num_gpu > 1 && gpu_milli < u64::from(MILLI) {
        return Err(CsvError {
            file: file.into(),
            line,
            message: format!("field `gpu_milli`: {gpu_milli} with {num_gpu} GPUs; only single-GPU pods share a GPU"),
        });
    }
    let spec = t.cell(row, "gpu_spec");
    let models = if spec.is_empty() || spec == "nan" {
        Vec::new()
    } else {
        spec.split('|').map(str::to_string).collect()
    };
    Ok(Pod {
        name: t.cell(row, "name").to_string(),
        request: Request {
            cpu_milli: t.number(line, row, "cpu_milli", 10_000_000)?,
            memory_mib: t.number(line, row, "memory_mib", 1 << 40)?,
            num_gpu: u32::try_from(num_gpu).unwrap_or(0),
            gpu_milli: if num_gpu == 0 {
                0
            } else {
                u32::try_from(gpu_milli).unwrap_or(0)
            },
            models,
            ..Request::default()
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_nodes_and_pods() {
        let fleet = parse_nodes(
            "n.csv",
            "sn,cpu_milli,memory_mib,gpu,model\nnode-0,64000,262144,2,P100\n",
        )
        .unwrap_or_default();
        assert_eq!(fleet.nodes.len(), 1);
        assert_eq!(fleet.gpu_count(), 2);
        let pods = parse_pods(
            "p.csv",
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos\np-1,4000,1024,1,250,V100M16|V100M32,BE\np-2,1000,10,0,0,,LS\n",
        )
        .unwrap_or_default();
        assert_eq!(pods.len(), 2);
        assert_eq!(pods.first().map(|p| p.request.models.len()), Some(2));
    }

    #[test]
    fn errors_name_file_line_and_field() {
        let e = parse_pods(
            "p.csv",
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np,abc,1,1,1000,\n",
        )
        .err();
        assert_eq!(
            e.map(|e| e.to_string()).as_deref(),
            Some(
                "p.csv:2: field `cpu_milli`: expected a whole number of zero or more, found `abc`"
            )
        );
        let e = parse_pods(
            "p.csv",
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np,1,1,1,2000,\n",
        )
        .err();
        assert!(e.is_some_and(|e| e.message.contains("above the limit")));
        let e = parse_nodes("n.csv", "").err();
        assert!(e.is_some_and(|e| e.message.contains("empty")));
        let e = parse_nodes("n.csv", "sn,cpu_milli,memory_mib,gpu\nx,1,1,1\n").err();
        assert!(e.is_some_and(|e| e.message.contains("missing column `model`")));
    }
}
