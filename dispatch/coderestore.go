package dispatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/codetree"
	"github.com/rlsched/rlsched/core"
)

// A run's code snapshot (issue 27) reaches its worker the way a resumed
// attempt's files do (restorestream.go): the worker asks with
// ArtifactAck{restore, code, path: a blob's sha256} and gets
// ArtifactChunk{restore, code} within its window. It may ask for the
// manifest (the blob named by the run's tree hash) and for the blobs that
// manifest names, nothing else.

// open opens f from off: a blob, or a tree's pack (codetree.Pack).
func (st *restoreStream) open(f core.Artifact, code bool, off int64) (io.ReadCloser, error) {
	if code && strings.HasSuffix(f.Path, codetree.PackSuffix) {
		return codetree.OpenPack(st.ctx, st.r.blobs, st.pack, off)
	}
	return st.r.blobs.Open(st.ctx, f.SHA256, off, -1)
}

// file is the blob or restored file a names, from the run's lists.
func (st *restoreStream) file(ctx context.Context, a *pb.ArtifactAck) (core.Artifact, error) {
	if a.Code {
		if st.code == nil {
			set, pack, err := st.r.codeSet(ctx, st.rr)
			if err != nil {
				return core.Artifact{}, fmt.Errorf("cannot list the run's code snapshot: %w", err)
			}
			st.code, st.pack = set, pack
		}
		f, ok := st.code[a.Path]
		if !ok {
			return core.Artifact{}, errors.New("not a blob of the run's code snapshot")
		}
		return f, nil
	}
	if st.set == nil {
		set, err := st.r.restoreSet(ctx, st.rr)
		if err != nil {
			return core.Artifact{}, fmt.Errorf("cannot list the run's files to restore: %w", err)
		}
		st.set = set
	}
	f, ok := st.set[a.Path]
	if !ok {
		return core.Artifact{}, errors.New("not among the run's files to restore")
	}
	return f, nil
}

// codeSet is the blobs of rr's code snapshot, by sha256: its manifest, the
// blobs of its files and its pack (named tree + codetree.PackSuffix),
// whose blob list it returns too.
func (r *restorer) codeSet(ctx context.Context, rr *runRec) (map[string]core.Artifact, []codetree.PackBlob, error) {
	t, err := r.st.Task(ctx, rr.taskID)
	if err != nil {
		return nil, nil, err
	}
	if t.Code.Tree == "" {
		return nil, nil, errors.New("the run has no code snapshot")
	}
	m, err := codetree.Load(ctx, r.blobs, t.Code.Tree)
	if err != nil {
		return nil, nil, err
	}
	b, err := r.blobs.Stat(ctx, t.Code.Tree)
	if err != nil {
		return nil, nil, err
	}
	set := map[string]core.Artifact{t.Code.Tree: {Path: t.Code.Tree, SHA256: t.Code.Tree, Size: b.Size}}
	pack := codetree.Pack(m)
	set[t.Code.Tree+codetree.PackSuffix] = core.Artifact{Path: t.Code.Tree + codetree.PackSuffix, Size: codetree.PackSize(pack)}
	for _, f := range m.Files {
		for i, sum := range f.Blobs() {
			set[sum] = core.Artifact{Path: sum, SHA256: sum, Size: codetree.ChunkLen(f.Size, i)}
		}
	}
	return set, pack, nil
}
