// Command ociimage assembles and unpacks the project's OCI images without a Docker daemon or a registry
// (go-containerregistry does the OCI work; this file only says what goes in):
//
//	ociimage build -out F.tar -name N -tag T -created UNIX [-base rootfs.tar] [-add SRC:DST[:MODE]]...
//	               [-symlink DST:TARGET]... [-label K=V]... [-env K=V]... [-user U] [-entrypoint PATH]
//	    writes an OCI archive (a tar of an OCI image layout) holding one image, prints "N:T sha256:..."
//	ociimage unpack F.tar DIR
//	    writes DIR/rootfs (the layers applied in order) and DIR/config.json (the image's runtime config)
//	ociimage digest F.tar
//	    prints the manifest digest of the image in an archive
//
// Everything that goes into an image is stamped with -created (the commit time), owned by root, and written in
// sorted order, so building twice from the same inputs gives the same bytes and the same digest.
package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: ociimage build|unpack|digest ...")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "build":
		err = build(os.Args[2:])
	case "unpack":
		if len(os.Args) != 4 {
			err = errors.New("usage: ociimage unpack ARCHIVE DIR")
		} else {
			err = unpack(os.Args[2], os.Args[3])
		}
	case "digest":
		if len(os.Args) != 3 {
			err = errors.New("usage: ociimage digest ARCHIVE")
		} else {
			var d v1.Hash
			if d, err = archiveDigest(os.Args[2]); err == nil {
				fmt.Println(d)
			}
		}
	default:
		err = fmt.Errorf("unknown command %q (build, unpack, digest)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func build(args []string) error {
	fl := flag.NewFlagSet("build", flag.ContinueOnError)
	out := fl.String("out", "", "OCI archive to write")
	name := fl.String("name", "", "image name (ovn-egressip)")
	tag := fl.String("tag", "latest", "image tag")
	created := fl.Int64("created", 0, "creation time, Unix seconds (the commit time)")
	base := fl.String("base", "", "uncompressed tar of a root filesystem: the first layer")
	user := fl.String("user", "", "the image's user (uid:gid)")
	entrypoint := fl.String("entrypoint", "", "the image's entrypoint (one path, no arguments)")
	var adds, links, labels, envs list
	fl.Var(&adds, "add", "SRC:DST[:MODE] file added in the top layer (repeatable)")
	fl.Var(&links, "symlink", "DST:TARGET symlink added in the top layer (repeatable)")
	fl.Var(&labels, "label", "K=V image label (repeatable)")
	fl.Var(&envs, "env", "K=V image environment (repeatable)")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if *out == "" || *name == "" {
		return errors.New("build: -out and -name are required")
	}
	when := time.Unix(*created, 0).UTC()

	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	var history []v1.History
	if *base != "" {
		l, err := tarball.LayerFromFile(*base, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return fmt.Errorf("base layer %s: %w", *base, err)
		}
		h := v1.History{Created: v1.Time{Time: when}, CreatedBy: "mmdebstrap root filesystem"}
		if img, err = mutate.Append(img, mutate.Addendum{Layer: l, History: h}); err != nil {
			return err
		}
		history = append(history, h)
	}
	top, err := topLayer(adds, links, when)
	if err != nil {
		return err
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(top)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return err
	}
	// The history names what was added where, not where it came from (a build directory differs between builds).
	var dsts []string
	for _, a := range adds {
		dsts = append(dsts, strings.Split(a, ":")[1]) // checked by topLayer
	}
	for _, s := range links {
		dsts = append(dsts, strings.Split(s, ":")[0])
	}
	h := v1.History{Created: v1.Time{Time: when}, CreatedBy: "ociimage build: add " + strings.Join(dsts, " ")}
	if img, err = mutate.Append(img, mutate.Addendum{Layer: l, History: h}); err != nil {
		return err
	}
	history = append(history, h)

	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = "amd64", "linux"
	cf.Created = v1.Time{Time: when}
	cf.History = history
	cf.Config.User = *user
	if *entrypoint != "" {
		cf.Config.Entrypoint = []string{*entrypoint}
	}
	cf.Config.Env = envs
	cf.Config.Labels = map[string]string{}
	for _, kv := range labels {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("-label %q: want K=V", kv)
		}
		cf.Config.Labels[k] = v
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}

	dir, err := os.MkdirTemp(filepath.Dir(*out), ".layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	ref := *name + ":" + *tag
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		// podman and skopeo read the tag from ref.name; containerd's import reads the full name from its own key.
		"org.opencontainers.image.ref.name": *tag,
		"io.containerd.image.name":          "docker.io/library/" + ref,
	})); err != nil {
		return err
	}
	if err := tarDir(dir, *out, when); err != nil {
		return err
	}
	fmt.Printf("%s %s\n", ref, digest)
	return nil
}

// topLayer is a tar of the added files and symlinks, with their parent directories, in path order.
func topLayer(adds, links list, when time.Time) ([]byte, error) {
	type entry struct {
		hdr  *tar.Header
		data []byte
	}
	entries := map[string]entry{}
	addDirs := func(p string) {
		for d := path.Dir(p); d != "." && d != "/"; d = path.Dir(d) {
			n := strings.TrimPrefix(d, "/") + "/"
			entries[n] = entry{hdr: &tar.Header{Typeflag: tar.TypeDir, Name: n, Mode: 0o755, ModTime: when}}
		}
	}
	for _, a := range adds {
		parts := strings.Split(a, ":")
		if len(parts) < 2 || len(parts) > 3 {
			return nil, fmt.Errorf("-add %q: want SRC:DST[:MODE]", a)
		}
		data, err := os.ReadFile(parts[0])
		if err != nil {
			return nil, err
		}
		mode := int64(0o755)
		if len(parts) == 3 {
			if mode, err = strconv.ParseInt(parts[2], 8, 32); err != nil {
				return nil, fmt.Errorf("-add %q: mode: %w", a, err)
			}
		}
		dst := strings.TrimPrefix(path.Clean(parts[1]), "/")
		addDirs(dst)
		entries[dst] = entry{hdr: &tar.Header{Typeflag: tar.TypeReg, Name: dst, Mode: mode, Size: int64(len(data)), ModTime: when}, data: data}
	}
	for _, s := range links {
		dst, target, ok := strings.Cut(s, ":")
		if !ok {
			return nil, fmt.Errorf("-symlink %q: want DST:TARGET", s)
		}
		dst = strings.TrimPrefix(path.Clean(dst), "/")
		addDirs(dst)
		entries[dst] = entry{hdr: &tar.Header{Typeflag: tar.TypeSymlink, Name: dst, Linkname: target, Mode: 0o777, ModTime: when}}
	}
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		e := entries[n]
		e.hdr.Format = tar.FormatPAX
		if err := tw.WriteHeader(e.hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// tarDir writes the regular files of dir (an OCI layout) into the tar out, in path order, stamped with when.
func tarDir(dir, out string, when time.Time) error {
	var names []string
	if err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			names = append(names, p)
		}
		return nil
	}); err != nil {
		return err
	}
	sort.Strings(names)
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	tw := tar.NewWriter(f)
	for _, p := range names {
		rel, _ := filepath.Rel(dir, p)
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel), ModTime: when, Mode: 0o644, Format: tar.FormatPAX}
		if st.IsDir() {
			hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, hdr.Name+"/", 0o755
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			continue
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, st.Size()
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		_, err = io.Copy(tw, src)
		src.Close()
		if err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}

// openArchive extracts an OCI archive into a temporary layout and returns its one image.
func openArchive(archive string) (v1.Image, func(), error) {
	dir, err := os.MkdirTemp("", "ociimage-")
	if err != nil {
		return nil, nil, err
	}
	cleanup := func() { os.RemoveAll(dir) }
	if err := untar(archive, dir); err != nil {
		cleanup()
		return nil, nil, err
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	if len(im.Manifests) != 1 {
		cleanup()
		return nil, nil, fmt.Errorf("%s: %d images, want 1", archive, len(im.Manifests))
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	return img, cleanup, nil
}

func archiveDigest(archive string) (v1.Hash, error) {
	img, cleanup, err := openArchive(archive)
	if err != nil {
		return v1.Hash{}, err
	}
	defer cleanup()
	return img.Digest()
}

// unpack writes the image's flattened root filesystem to dir/rootfs and its config to dir/config.json.
func unpack(archive, dir string) error {
	img, cleanup, err := openArchive(archive)
	if err != nil {
		return err
	}
	defer cleanup()
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	rootfs := filepath.Join(dir, "rootfs")
	if err := os.RemoveAll(rootfs); err != nil {
		return err
	}
	if err := os.MkdirAll(rootfs, 0o755); err != nil {
		return err
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	if err := extract(tar.NewReader(rc), rootfs); err != nil {
		return err
	}
	b, err := json.MarshalIndent(cf.Config, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644)
}

func untar(archive, dir string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	return extract(tar.NewReader(f), dir)
}

// extract writes a tar's directories, regular files, symlinks and hard links under dir, keeping modes and
// owners; names that leave dir are an error.
func extract(tr *tar.Reader, dir string) error {
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Clean(hdr.Name)
		if name == "." {
			continue
		}
		if !filepath.IsLocal(name) {
			return fmt.Errorf("tar entry %q leaves the root", hdr.Name)
		}
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		mode := fs.FileMode(hdr.Mode).Perm() | fs.FileMode(hdr.Mode)&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			_ = os.Remove(p)
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			_ = os.Remove(p)
			if err := os.Symlink(hdr.Linkname, p); err != nil {
				return err
			}
			_ = os.Lchown(p, hdr.Uid, hdr.Gid)
			continue
		case tar.TypeLink:
			target := filepath.Clean(hdr.Linkname)
			if !filepath.IsLocal(target) {
				return fmt.Errorf("tar link %q -> %q leaves the root", hdr.Name, hdr.Linkname)
			}
			_ = os.Remove(p)
			if err := os.Link(filepath.Join(dir, target), p); err != nil {
				return err
			}
			continue
		default:
			continue // devices and fifos: a container gets its /dev from the runtime
		}
		if err := os.Lchown(p, hdr.Uid, hdr.Gid); err != nil {
			return err
		}
		if err := os.Chmod(p, mode); err != nil {
			return err
		}
	}
}
