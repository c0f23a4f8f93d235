// Package artifactpipe is the master's receiver of run outputs: it takes
// ArtifactChunk frames from the event loops (Pipe.Submit), writes each
// file's bytes as they come while hashing them, commits the file to the
// blob store (artifact) and its row to the index (store) when
// the last chunk arrives, and acks every chunk once its bytes are durable
// in the staging area and the last one once the file is indexed. It is a
// sibling of logpipe, with a queue, a window and writers of its own, so
// a checkpoint never takes the room of the runs' logs.
//
// What it must never do: block an event loop (Submit refuses "busy"
// instead of waiting, and does no I/O); hold a whole file in memory (a
// file streams through in chunks; the queue is bounded in bytes); write
// anything outside the blob store and its staging directory (paths are
// checked by the caller and never touch a file system here: blobs are
// named by digest and staged uploads by a hash of their key); stop a run
// (a file over a limit, a full disk or a store error only refuses the
// file and puts a warning on the run).
//
// # The path of a chunk
//
// A gnet event loop decodes an ArtifactChunk, checks its fence and path
// (package dispatch) and calls Submit, which pushes it onto the channel of
// the writer goroutine its run hashes to, within QueueBytes. The writer
// owns the state of that run's uploads (no lock): per (attempt, path,
// version) an upload, whose first chunk checks the limits and opens a
// sink; each chunk is appended at the upload's offset (bytes it has are
// dropped, an offset past it is answered "gap"); the last one commits.
//
// # Sinks
//
// A file of one chunk goes to Store.Put from memory. Longer files go,
// with a store that stages (the disk backend: Stager), to a file under
// its StageDir named by the upload's key and version and locked while a
// master writes it, hashed as it is written and adopted by rename; such a
// file survives a reconnect or a master failover, and the next master
// resumes it from its length (rehashing what is there). With any other
// store (S3) a longer file streams into Store.Put through a pipe; its
// upload lives as long as the connection, and after a failover it starts
// again from 0 ("gap" at offset 0).
//
// # Limits
//
// A file over MaxFileBytes, a run past MaxRunBytes (the sizes of its rows,
// all attempts) or MaxRunFiles (its rows), its owner past MaxUserBytes or
// the server past MaxTotalBytes (usage.go: the store's sums, read at most
// every 10 s, plus this master's uploads) is refused at its first chunk
// ("refused: …", never resent in that version) and the run gets the
// warning artifact_limit; a store that fails (ENOSPC, S3 away) answers
// "failed: …" (the worker tries again later) and the run gets
// artifact_error. Warnings are once per run and path (and once per run
// for the file count, and for each of the two caps).
//
// # Priority
//
// A checkpoint's upload is bulk work beside the runs' logs, which someone
// may be watching live: its writers, hashers and S3 streams run on
// threads of their own niced by backgroundNice (lowerPriority), so when
// the cores are busy the kernel runs the log pipe first and the upload
// takes what is left; on idle cores the nice changes nothing. (Measured
// in bench/changes.md, issue 33: the logs' p99 rose 3× during an upload,
// sharing the cores with sha256, copies and writes of 1 MiB chunks. With
// the nice the rise is not yet within the 2× goal: BENCHMARKS.md,
// artifacts.)
package artifactpipe
