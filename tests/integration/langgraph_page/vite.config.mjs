// The useStream page the LangGraph browser test builds (`vite build --outDir <tmp>`), served
// from an origin other than the gateway's: its calls to /langgraph are cross-origin (CORS).
import react from "@vitejs/plugin-react";
import { defineConfig } from "vite";

export default defineConfig({
  root: import.meta.dirname,
  base: "./",
  plugins: [react()],
  logLevel: "warn",
  build: { emptyOutDir: true, sourcemap: false, chunkSizeWarningLimit: 2000 },
});
