// Command reference_server serves fixed /metrics bytes with Go's net/http, the server
// node_exporter and kube-state-metrics answer scrapes with. The bench captures what our
// exporter just served (the plain body, its gzip variant and their Content-Type), starts this
// on a free port and puts the same wrk load on both in the same run: the ratio says how much
// of a latency is our server and how much the machine (wrk and the server sharing its cores,
// loopback copying the bodies). It does no work per request beyond choosing a body, so it is
// close to the best any server can do on that machine.
package main

import (
	"flag"
	"log"
	"net/http"
	"os"
	"strconv"
	"strings"
)

// acceptsGzip decides as our exporter does (exporter/serve/server.py accepts_gzip): an
// explicit gzip or x-gzip entry decides, else "*"; q=0 (or an unreadable q) refuses.
func acceptsGzip(header string) bool {
	var explicit, wildcard float64 = -1, -1
	for _, entry := range strings.Split(header, ",") {
		parts := strings.Split(entry, ";")
		coding := strings.ToLower(strings.TrimSpace(parts[0]))
		quality := 1.0
		for _, param := range parts[1:] {
			name, value, _ := strings.Cut(strings.TrimSpace(param), "=")
			if strings.ToLower(strings.TrimSpace(name)) == "q" {
				q, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
				if err != nil {
					q = 0
				}
				quality = q
			}
		}
		switch coding {
		case "gzip", "x-gzip":
			explicit = max(explicit, quality)
		case "*":
			wildcard = quality
		}
	}
	if explicit >= 0 {
		return explicit > 0
	}
	return wildcard > 0
}

func mustRead(path string) []byte {
	data, err := os.ReadFile(path)
	if err != nil {
		log.Fatal(err)
	}
	return data
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	plainPath := flag.String("plain", "", "file holding the plain body")
	gzipPath := flag.String("gzip", "", "file holding the gzipped body")
	contentType := flag.String("content-type", "", "Content-Type of both bodies")
	flag.Parse()
	if *plainPath == "" || *gzipPath == "" || *contentType == "" {
		log.Fatal("-plain, -gzip and -content-type are required")
	}
	plain, gzipped := mustRead(*plainPath), mustRead(*gzipPath)
	plainLength, gzipLength := strconv.Itoa(len(plain)), strconv.Itoa(len(gzipped))

	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		header := w.Header()
		header.Set("Content-Type", *contentType)
		header.Set("Vary", "Accept-Encoding")
		body, length := plain, plainLength
		if acceptsGzip(r.Header.Get("Accept-Encoding")) {
			header.Set("Content-Encoding", "gzip")
			body, length = gzipped, gzipLength
		}
		header.Set("Content-Length", length)
		w.Write(body)
	})
	log.Fatal(http.ListenAndServe(*listen, mux))
}
